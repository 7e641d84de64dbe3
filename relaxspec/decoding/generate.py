"""Autoregressive and speculative generation over HF causal LMs (relaxspec's own draft -> verify loop).

Invariants (per row): the target cache holds every committed token except the last one (`last`), which
the next verify pass feeds first; the draft cache holds every committed token except `pending` (one
token, or two after a fully accepted round whose last draft token the draft never consumed). One round:

1. draft k tokens (k draft forwards; k+1 with ``exact_bonus``, which also yields q at the bonus position),
2. one target forward over ``[last, x_1..x_k]`` gives p_1..p_{k+1} and the target's hidden states,
3. the (optional) weight head maps both models' last hidden states to per-position target weights w,
4. the verification rule (relaxspec.verify) returns how many drafts to keep and the next token,
5. commit, cut at EOS / stop strings / max_new_tokens, mark the rejected slots invalid in both caches.

Rows advance by different amounts; see relaxspec.decoding.lm for the slot-mask mechanism.
Verification rules get randomness from ``generator`` (uniforms drawn inside the rule); drafting draws
from the same generator, so a seeded generator makes a whole run reproducible.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from relaxspec.decoding.lm import CacheState, CausalLM
from relaxspec.decoding.sampling import SamplingParams, draw, probs
from relaxspec.propose.lookup import PromptLookup
from relaxspec.propose.policies import ConstantPolicy, LengthPolicy, StepInfo


@dataclass
class RowStats:
    """Integer counters of one generated sequence; aggregate metrics are ratios of their sums."""

    new_tokens: int = 0
    target_calls: int = 0  # decode-phase target forwards this row took part in (prefill excluded)
    draft_calls: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    accept_at_position: list[int] = field(default_factory=list)  # rounds with draft position j accepted
    drafted_at_position: list[int] = field(default_factory=list)  # rounds that drafted position j
    w_target_sum: float = 0.0
    w_target_count: int = 0


@dataclass
class RowOutput:
    tokens: list[int]
    finish_reason: str  # eos | stop | length
    stats: RowStats


@dataclass
class BatchTiming:
    """Wall-clock split of one generate call (seconds)."""

    prefill: float = 0.0
    draft: float = 0.0
    verify: float = 0.0
    other: float = 0.0

    @property
    def total(self) -> float:
        return self.prefill + self.draft + self.verify + self.other


class StopChecker:
    """Finds where a row's new tokens must be cut: after an EOS token or a completed stop string."""

    def __init__(self, eos_ids: Sequence[int], stop_strings: Sequence[str] = (), tokenizer: Any = None):
        self.eos = set(int(e) for e in eos_ids)
        self.stop = [s for s in stop_strings if s]
        if self.stop and tokenizer is None:
            raise ValueError("stop strings need a tokenizer")
        self.tokenizer = tokenizer

    def cut(self, tokens: list[int], n_new: int) -> tuple[int, str | None]:
        """Return (length to keep, reason) scanning the last ``n_new`` tokens in order."""
        start = len(tokens) - n_new
        for j in range(start, len(tokens)):
            if tokens[j] in self.eos:
                return j + 1, "eos"
            if self.stop:
                text = self.tokenizer.decode(tokens[: j + 1], skip_special_tokens=True)
                tail = text[-(max(len(s) for s in self.stop) + 64) :]
                if any(s in tail for s in self.stop):
                    return j + 1, "stop"
        return len(tokens), None


class _Rows:
    """Bookkeeping of the rows still generating (index into the original request list)."""

    def __init__(self, n: int, max_new: Sequence[int], k: int = 0):
        self.ids = list(range(n))
        self.tokens: list[list[int]] = [[] for _ in range(n)]
        self.reason: list[str] = ["length"] * n
        self.max_new = list(max_new)
        self.stats = [
            RowStats(accept_at_position=[0] * k, drafted_at_position=[0] * k) for _ in range(n)
        ]

    def commit(self, pos: int, new: list[int], stopper: StopChecker) -> bool:
        """Append ``new`` to active row ``pos``; return True when the row is finished."""
        rid = self.ids[pos]
        toks = self.tokens[rid]
        room = self.max_new[rid] - len(toks)
        toks.extend(new[:room])
        keep, reason = stopper.cut(toks, min(len(new), room))
        del toks[keep:]
        self.stats[rid].new_tokens = len(toks)
        if reason is not None:
            self.reason[rid] = reason
            return True
        return len(toks) >= self.max_new[rid]

    def outputs(self) -> list[RowOutput]:
        return [RowOutput(t, r, s) for t, r, s in zip(self.tokens, self.reason, self.stats, strict=True)]


def _prefill(models: Sequence[CausalLM], states: Sequence[CacheState], prompts: Sequence[Sequence[int]]) -> Tensor:
    """Feed every prompt but its last token (left-padded) to each model; return the last tokens [B].

    On CPU a batch is prefilled row by row and the caches are left-padded afterwards (`CausalLM.prefill_rows`);
    on GPU as one padded batch.
    """
    if any(len(p) == 0 for p in prompts):
        raise ValueError("empty prompt: every request needs at least one token")
    b = len(prompts)
    width = max(len(p) for p in prompts) - 1
    device = models[0].device
    if width > 0 and b > 1 and device.type == "cpu":  # compute-bound: padding is pure waste (lm.prefill_rows)
        for model, state in zip(models, states, strict=True):
            model.prefill_rows(state, [list(p[:-1]) for p in prompts])
    elif width > 0:
        ids = torch.zeros(b, width, dtype=torch.long)
        valid = torch.zeros(b, width, dtype=torch.bool)
        for i, p in enumerate(prompts):
            n = len(p) - 1
            if n:
                ids[i, width - n :] = torch.tensor(p[:-1])
                valid[i, width - n :] = True
        for model, state in zip(models, states, strict=True):
            model.forward(state, ids, valid, keep=0)
    return torch.tensor([p[-1] for p in prompts], dtype=torch.long, device=device)


def _drop_rows(done: list[int], rows: _Rows, states: Sequence[CacheState], tensors: dict[str, Any]) -> dict:
    """Remove finished active positions from the caches and every per-row tensor / list."""
    if not done:
        return tensors
    keep = [i for i in range(len(rows.ids)) if i not in set(done)]
    rows.ids = [rows.ids[i] for i in keep]
    if not keep:
        return tensors
    idx = torch.tensor(keep, dtype=torch.long, device=states[0].valid.device)
    for st in states:
        CausalLM.select(st, idx)
    out = {}
    for name, val in tensors.items():
        if isinstance(val, Tensor):
            out[name] = val[idx.to(val.device)]
        elif isinstance(val, dict):
            out[name] = {k: v[idx.to(v.device)] for k, v in val.items()}
        elif isinstance(val, list):
            out[name] = [val[i] for i in keep]
        else:
            out[name] = val
    return out


@torch.no_grad()
def generate_ar(
    target: CausalLM,
    prompts: Sequence[Sequence[int]],
    *,
    params: SamplingParams,
    max_new_tokens: Sequence[int],
    stopper: StopChecker,
    generator: torch.Generator | None = None,
    timing: BatchTiming | None = None,
) -> list[RowOutput]:
    """Plain autoregressive decoding of the target through the same wrapper (the AR baseline)."""
    timing = timing if timing is not None else BatchTiming()
    rows = _Rows(len(prompts), max_new_tokens)
    t0 = time.perf_counter()
    state = target.new_state(len(prompts))
    last = _prefill([target], [state], prompts)
    timing.prefill += time.perf_counter() - t0
    live = {"last": last}
    while rows.ids:
        t1 = time.perf_counter()
        logits, _ = target.forward(state, live["last"][:, None], None, keep=1)
        nxt = draw(probs(logits[:, -1], params), params, generator)
        t2 = time.perf_counter()
        done = []
        for pos, tok in enumerate(nxt.tolist()):
            st = rows.stats[rows.ids[pos]]
            st.target_calls += 1
            st.rounds += 1
            if rows.commit(pos, [tok], stopper):
                done.append(pos)
        live = _drop_rows(done, rows, [state], {"last": nxt})
        timing.verify += t2 - t1
        timing.other += time.perf_counter() - t2
    return rows.outputs()


Rule = Callable[..., Any]


def _slice_state(state: dict[str, Tensor] | None, idx: Tensor) -> dict[str, Tensor] | None:
    if state is None:
        return None
    return {k: v[idx.to(v.device)] for k, v in state.items()}


def _verify_ragged(rule: Rule, q: Tensor, p: Tensor, x: Tensor, w: Tensor | None, lengths: Tensor, *,
                   q_bonus: bool, generator, greedy: bool, state, rule_kwargs: dict[str, Any]):
    """Run ``rule`` once per group of rows with the same proposed length L, on exactly the tensors a
    constant-length round with k = L would pass (q[:, :L] or q[:, :L+1], p[:, :L+1], x[:, :L], w[:, :L+1]),
    and scatter the results back, padded to the batch's K = max L (positions >= L: not accepted, prob 0).
    With one group (always so for the constant policy) this is a single plain rule call."""
    from relaxspec.verify import VerifyOutput

    b, kk = x.shape
    uniq = sorted(set(lengths.tolist()))

    def args(L: int, idx: Tensor | None):
        sel = (lambda t: t) if idx is None else (lambda t: t[idx])
        qg = sel(q)[:, : L + 1 if q_bonus else L]
        wg = None
        if w is not None:
            wg = sel(w)[:, : L + 1]
            if not q_bonus:  # no q at the bonus position: the bonus comes from p (w = 1 there)
                wg = torch.cat([wg[:, :L], torch.ones_like(wg[:, :1])], dim=1)
        return qg, sel(p)[:, : L + 1], sel(x)[:, :L], wg

    if len(uniq) == 1 and uniq[0] == kk:
        qg, pg, xg, wg = args(kk, None)
        return rule(qg, pg, xg, generator=generator, w=wg, greedy=greedy, state=state, **rule_kwargs)
    dev = p.device
    n = torch.zeros(b, dtype=torch.long, device=dev)
    nxt = torch.zeros(b, dtype=torch.long, device=dev)
    mask = torch.zeros(b, kk, dtype=torch.bool, device=dev)
    aprob = torch.zeros(b, kk, dtype=p.dtype, device=dev)
    eacc = torch.zeros(b, kk, dtype=p.dtype, device=dev)
    new_state: dict[str, Tensor] | None = None
    for L in uniq:
        idx = (lengths == L).nonzero().squeeze(1).to(dev)
        qg, pg, xg, wg = args(L, idx)
        out = rule(qg, pg, xg, generator=generator, w=wg, greedy=greedy, state=_slice_state(state, idx),
                   **rule_kwargs)
        n[idx] = out.n_accepted.to(torch.long)
        nxt[idx] = out.next_token.to(torch.long)
        mask[idx, :L] = out.accept_mask
        aprob[idx, :L] = out.accept_prob.to(p.dtype)
        eacc[idx, :L] = out.expected_accept.to(p.dtype)
        if out.state is not None:
            if new_state is None:
                new_state = {k: torch.zeros((b, *v.shape[1:]), dtype=v.dtype, device=v.device)
                             for k, v in out.state.items()}
            for k, v in out.state.items():
                new_state[k][idx.to(v.device)] = v
    return VerifyOutput(n, nxt, mask, aprob, eacc, new_state)


@torch.no_grad()
def generate_speculative(
    draft: CausalLM | None,
    target: CausalLM,
    prompts: Sequence[Sequence[int]],
    *,
    params: SamplingParams,
    max_new_tokens: Sequence[int],
    stopper: StopChecker,
    rule: Rule,
    rule_kwargs: dict[str, Any] | None = None,
    k: int | None = None,
    policy: LengthPolicy | None = None,
    lookup: PromptLookup | None = None,
    head: torch.nn.Module | None = None,
    exact_bonus: bool = False,
    generator: torch.Generator | None = None,
    timing: BatchTiming | None = None,
    on_round: Callable[[dict[str, Any]], None] | None = None,
) -> list[RowOutput]:
    """Speculative decoding with any verification rule from relaxspec.verify and any draft-length policy.

    Args:
        draft, target: wrapped models sharing a vocabulary (``draft`` may be None with ``lookup``).
        prompts: token ids per row (already chat-rendered).
        params: sampling knobs, identical for both models.
        max_new_tokens: per-row budget.
        stopper: EOS ids and stop strings.
        rule: a verification rule ``rule(q, p, x, *, generator, w, greedy, state, **rule_kwargs)``.
        rule_kwargs: the rule's hyperparameters.
        k: constant draft length per round (shorthand for ``policy=ConstantPolicy(k)``).
        policy: a draft-length policy (relaxspec.propose.policies); exactly one of ``k`` / ``policy``.
        lookup: propose with prompt lookup (n-gram, one-hot q, no draft model) instead of the draft model.
        head: DIVERSED weight head (``head(h_q, h_p) -> w_target``); None for fixed-weight rules.
        exact_bonus: draft one extra step so q (and the head's input) exist at the bonus position.
        generator: randomness for drafting and verification.
        timing: accumulates the draft / verify / other wall-clock split.
        on_round: optional callback receiving per-round tensors (for tests and traces).

    Ragged lengths: each row's policy picks its own length L_r <= max_len. The draft model runs (batched)
    until every row has stopped (K = max_r L_r steps). Positions a row did not propose (j > L_r) are not
    verified: the rule runs once per group of equal L on tensors cut to that L (``_verify_ragged``), so
    each row sees exactly a constant-length round with k = L_r. Those positions are not counted as drafted,
    and since n_accepted <= L_r their target and draft cache slots are invalidated like rejected drafts.
    """
    if (k is None) == (policy is None):
        raise ValueError("pass exactly one of k (constant length) or policy")
    if policy is None:
        if k < 1:
            raise ValueError(f"draft length k must be >= 1, got {k}")
        policy = ConstantPolicy(k)
    if lookup is None and draft is None:
        raise ValueError("the draft model is needed unless proposing with prompt lookup")
    if lookup is not None and head is not None:
        raise ValueError("the weight head needs draft hidden states; it cannot run with prompt lookup")
    use_model = lookup is None
    q_bonus = exact_bonus and use_model  # lookup has no q at the bonus position: the bonus comes from p
    rule_kwargs = dict(rule_kwargs or {})
    timing = timing if timing is not None else BatchTiming()
    b = len(prompts)
    max_len = policy.max_len
    rows = _Rows(b, max_new_tokens, max_len)
    t0 = time.perf_counter()
    tstate = target.new_state(b)
    dstate = draft.new_state(b) if use_model else None
    models, states = ([target, draft], [tstate, dstate]) if use_model else ([target], [tstate])
    last = _prefill(models, states, prompts)
    timing.prefill += time.perf_counter() - t0
    pstate = policy.init(b)
    lstate = lookup.init(b, max_len) if lookup is not None else None
    live: dict[str, Any] = {"last": last, "pending": [[t] for t in last.tolist()], "rstate": None}
    vocab = None
    dev = target.device
    while rows.ids:
        bsz = len(rows.ids)
        # ---------------------------------------------------------------- propose
        t1 = time.perf_counter()
        budget = policy.begin_round(pstate).clamp(1, max_len).cpu()
        active = torch.ones(bsz, dtype=torch.bool)
        lengths = torch.zeros(bsz, dtype=torch.long)
        qs, hqs, xs, tok_probs = [], [], [], []
        n_fed = 0  # drafted tokens fed to the draft model this round (its slots d0+m .. d0+m+n_fed-1)
        if use_model:
            pending = live["pending"]
            m = max(len(pd) for pd in pending)
            ids = torch.zeros(bsz, m, dtype=torch.long)
            valid = torch.zeros(bsz, m, dtype=torch.bool)
            for i, pd in enumerate(pending):
                ids[i, m - len(pd) :] = torch.tensor(pd)
                valid[i, m - len(pd) :] = True
            d0 = dstate.valid.shape[1]
            logits, hid = draft.forward(dstate, ids, valid, keep=1)
            n_draft_fwd = 1
            for j in range(1, max_len + 1):
                qj = probs(logits[:, -1], params)
                qs.append(qj)
                hqs.append(hid[:, -1])
                step = StepInfo(j, qj.max(-1).values.cpu(), q=qj)  # entropy only if the policy reads it
                admit = policy.admit(pstate, step).cpu() | (j <= policy.min_len)
                active &= admit & (j <= budget)
                if not bool(active.any()):
                    break
                xj = draw(qj, params, generator)
                xs.append(xj)
                tpj = qj.gather(-1, xj[:, None]).squeeze(-1).cpu()
                tok_probs.append(tpj)
                lengths[active] = j
                step.token_prob = tpj
                active &= policy.extend(pstate, step).cpu() & (j < budget)
                if not bool(active.any()) and not exact_bonus:
                    break
                logits, hid = draft.forward(dstate, xj[:, None], None, keep=1)
                n_draft_fwd += 1
                n_fed += 1
                if not bool(active.any()):  # exact_bonus: q at position j+1 is now known
                    qs.append(probs(logits[:, -1], params))
                    hqs.append(hid[:, -1])
                    break
            kk = len(xs)
            x = torch.stack(xs, dim=1).to(dev)
            q = torch.stack(qs, dim=1).to(dev)[:, : kk + 1]
        else:
            n_draft_fwd = 0
            hist = [list(prompts[rid]) + rows.tokens[rid] for rid in rows.ids]
            props, conf = lookup.propose(lstate, hist, max_len)
            avail = torch.tensor([len(pr) for pr in props], dtype=torch.long)
            for j in range(1, max_len + 1):
                step = StepInfo(j, conf[:, j - 1].float(), torch.zeros(bsz))
                admit = policy.admit(pstate, step).cpu() | (j <= policy.min_len)
                active &= admit & (j <= budget) & (j <= avail)
                if not bool(active.any()):
                    break
                lengths[active] = j
                step.token_prob = torch.ones(bsz)
                tok_probs.append(step.token_prob)
                active &= policy.extend(pstate, step).cpu() & (j < budget)
                if not bool(active.any()):
                    break
            kk = int(lengths.max())
            x = torch.zeros(bsz, kk, dtype=torch.long)
            for i, pr in enumerate(props):
                x[i, : min(len(pr), kk)] = torch.tensor(pr[:kk])
            x = x.to(dev)
        # ---------------------------------------------------------------- verify
        t2 = time.perf_counter()
        t_start = tstate.valid.shape[1]
        p_logits, hp = target.forward(tstate, torch.cat([live["last"][:, None], x], dim=1), None, keep=kk + 1)
        p = probs(p_logits, params)
        if vocab is None:
            vocab = p.shape[-1] if not use_model else min(p.shape[-1], qs[0].shape[-1])
        if p.shape[-1] != vocab:  # padded embedding rows beyond the tokenizer
            p = p[..., :vocab] / p[..., :vocab].sum(-1, keepdim=True)
        if use_model:
            if q.shape[-1] != vocab:
                q = q[..., :vocab] / q[..., :vocab].sum(-1, keepdim=True)
        else:  # deterministic proposer: one-hot q
            q = torch.nn.functional.one_hot(x.clamp(max=vocab - 1), vocab).to(p.dtype)
        w = None
        if head is not None:
            hq = torch.stack(hqs, dim=1).to(dev)[:, : kk + 1]
            w = head(hq.float(), hp[:, : hq.shape[1]].float()).to(p.dtype)
            if w.shape[1] == kk:
                w = torch.cat([w, torch.ones_like(w[:, :1])], dim=1)
        out = _verify_ragged(rule, q, p, x, w, lengths, q_bonus=q_bonus, generator=generator,
                             greedy=params.greedy, state=live["rstate"], rule_kwargs=rule_kwargs)
        t3 = time.perf_counter()
        # ---------------------------------------------------------------- commit
        n = out.n_accepted.to(torch.long)
        n_list, nxt_list = n.tolist(), out.next_token.tolist()
        x_list = x.tolist()
        len_list = lengths.tolist()
        acc = out.accept_mask.tolist()
        done, new_pending = [], []
        for pos in range(bsz):
            rid = rows.ids[pos]
            st = rows.stats[rid]
            L = len_list[pos]
            st.rounds += 1
            st.target_calls += 1
            st.draft_calls += n_draft_fwd
            st.drafted += L
            st.accepted += n_list[pos]
            for j in range(L):
                st.drafted_at_position[j] += 1
                st.accept_at_position[j] += int(acc[pos][j])
            if w is not None:
                st.w_target_sum += float(w[pos, : n_list[pos] + 1].sum())
                st.w_target_count += n_list[pos] + 1
            new = x_list[pos][: n_list[pos]] + [nxt_list[pos]]
            if rows.commit(pos, new, stopper):
                done.append(pos)
            fed_last = n_list[pos] <= n_fed  # x_n is in the draft cache (or n = 0)
            new_pending.append([nxt_list[pos]] if fed_last else [x_list[pos][n_list[pos] - 1], nxt_list[pos]])
        tp = torch.stack(tok_probs, dim=1) if tok_probs else torch.zeros(bsz, 0)
        policy.end_round(pstate, lengths, n.cpu(), tp)
        if lookup is not None:
            lookup.end_round(lstate, lengths, n.cpu())
        # rejected and unproposed drafts become holes: target slots t_start+1+j, draft slots d0+m+j, j >= n
        j_idx = torch.arange(kk, device=dev)
        reject = j_idx[None, :] >= n[:, None]
        drop_t = torch.zeros_like(tstate.valid)
        drop_t[:, t_start + 1 : t_start + 1 + kk] = reject
        CausalLM.invalidate(tstate, drop_t)
        if use_model and n_fed:
            drop_d = torch.zeros_like(dstate.valid)
            drop_d[:, d0 + m : d0 + m + n_fed] = reject[:, :n_fed].to(drop_d.device)
            CausalLM.invalidate(dstate, drop_d)
        for st_ in states:
            CausalLM.trim(st_)
        if on_round is not None:
            on_round({"n": n, "x": x, "next": out.next_token, "w": w, "tstate": tstate, "dstate": dstate,
                      "lengths": lengths.clone(), "n_fed": n_fed, "rows": list(rows.ids),
                      "tokens": [list(rows.tokens[r]) for r in rows.ids]})
        if done:
            keep = [i for i in range(bsz) if i not in set(done)]
            pstate = policy.select(pstate, keep)
            if lstate is not None:
                lstate = {name: val[torch.tensor(keep, dtype=torch.long)] for name, val in lstate.items()}
        live = _drop_rows(
            done,
            rows,
            states,
            {"last": out.next_token.to(dev), "pending": new_pending, "rstate": out.state},
        )
        if rows.ids:
            for st_ in states:
                CausalLM.compact(st_)
        t4 = time.perf_counter()
        timing.draft += t2 - t1
        timing.verify += t3 - t2
        timing.other += t4 - t3
    return rows.outputs()
