"""The one context ladder, and the optional memory a plan trades before "nothing fits".

A plan tries `ladder(...)` best first and takes the first step that fits:

0. with drafts asked for (`--draft auto|ngram|mtp`) on a model whose rollback copies a recurrent
   state (a hybrid on llama.cpp) or whose drafts load its MTP head: the first context with
   drafting's snapshots of that state and the head, then the same context without them
   (drafts off): drafts go before any context does;
1. the context: the requested one, else 8192 and the smaller steps down to 2048 (never more
   than the model was trained for), with everything else in full;
2. then the same contexts with fewer prompt-cache checkpoints of a recurrent state (3, 2, 1:
   the newest one serves the next turn; older ones only a rewind further back);
3. then no checkpoint at all (a rewind or an edited turn re-reads the whole prompt);
4. then smaller prompt batches (slower prompt reading, smaller compute buffers).

Steps 2 to 4 are trades: a build that fits only by one ranks after every build that fits
without (drafts off, like a smaller context, is not: it is no memory the build needs). `gave_up(step, top)` says in words what a step gave up against the best one.
"""

from __future__ import annotations

from dataclasses import dataclass

from pocketchat.types import MAX_CHECKPOINTS, N_BATCH

DEFAULT_CTX = 8192
MIN_CTX = 2048  # the smallest context the plan picks on its own
SMALLEST_CTX = 256  # the smallest --ctx accepted at all
CTX_STEPS = (8192, 6144, 4096, 3072, 2048)
FEWER_CHECKPOINTS = (3, 2, 1)
SMALLER_BATCHES = (256, 128)


@dataclass(frozen=True)
class Step:
    """One way to size the optional memory of a plan."""

    n_ctx: int
    checkpoints: int = MAX_CHECKPOINTS
    n_batch: int = N_BATCH
    snapshots: int = 0  # recurrent-state copies drafting keeps per sequence (0: drafts off)
    head: bool = False  # drafts load the model's MTP head (`types.runs_head`)

    @property
    def drafts(self) -> bool:
        """Whether this step keeps memory for drafts. False also where drafts need none: an
        attention-only model's drafts roll back without snapshots and still run."""
        return self.snapshots > 0 or self.head

    @property
    def traded(self) -> bool:
        """Whether this step gives up more than context (checkpoints or batch size)."""
        return self.checkpoints < MAX_CHECKPOINTS or self.n_batch < N_BATCH


def context_steps(requested: int | None, model_max: int | None = None) -> tuple[list[int], str | None]:
    """The contexts to try, best first, and a note when the request was lowered to the model's.

    The requested context alone when there is one; else 8192 and the smaller steps. Never more
    than the model was trained for (`model_max`, from its header, when known).
    """
    note = None
    steps = [requested] if requested is not None else list(CTX_STEPS)
    if model_max:
        if requested is not None and requested > model_max:
            note = f"--ctx {requested} is more than the model was trained for; using {model_max}"
        steps = sorted({min(c, model_max) for c in steps}, reverse=True)
    return steps, note


def ladder(requested: int | None, model_max: int | None = None, *,
           snapshots: int = 0, head: bool = False) -> tuple[list[Step], str | None]:
    """Every step to try, best first (see the module's docstring), and the context note.
    `snapshots`: the recurrent-state copies drafts need (0: no drafts, or they cost nothing);
    `head`: whether they load the model's MTP head."""
    ctxs, note = context_steps(requested, model_max)
    top = Step(ctxs[0], snapshots=snapshots, head=head)
    steps = [top] if top.drafts else []
    steps += [Step(c) for c in ctxs]
    steps += [Step(c, k) for c in ctxs for k in FEWER_CHECKPOINTS]
    steps += [Step(c, 0) for c in ctxs]
    steps += [Step(c, 0, b) for c in ctxs for b in SMALLER_BATCHES]
    return steps, note


def gave_up(step: Step, top: Step, *, recurrent: bool = True) -> tuple[str, ...]:
    """What `step` gives up against `top`, in words (nothing: the same)."""
    lost: list[str] = []
    if top.drafts and not step.drafts:
        held = [f"{top.snapshots} recurrent-state snapshots per sequence"] if top.snapshots else []
        held += ["the MTP head"] if top.head else []
        lost.append(f"drafts (off: their {' and '.join(held)})")
    if step.n_ctx < top.n_ctx:
        lost.append(f"context {step.n_ctx} (not {top.n_ctx})")
    if recurrent and step.checkpoints < top.checkpoints:
        kept = "no prompt-cache checkpoint" if step.checkpoints == 0 else (
            f"{step.checkpoints} prompt-cache checkpoint" + ("s" if step.checkpoints > 1 else ""))
        lost.append(f"{kept} (not {top.checkpoints})")
    if step.n_batch < top.n_batch:
        lost.append(f"prompt batches of {step.n_batch} tokens (not {top.n_batch})")
    return tuple(lost)
