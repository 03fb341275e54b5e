"""Two ways to roll a batch's shared target cache back, at B = 4, beside the decoder of commit 2a643f1 (remote code):
`new-gather` moves each row's accepted path to the front of the round's slots, `new-mask` marks rejected columns
unused (no key moves; what the package now does for B > 1). Rotated order per batch; bf16, 1 thread. Written against
the decoder of commit 6f7fe6d (where `TargetSlots.commit` gathered); the result is in results/rollback_policies_b4.txt.

    OMP_NUM_THREADS=1 python experiments/decoding_core/rollback_policies.py
"""

import sys
import tempfile
import time
from pathlib import Path

import torch


sys.path.insert(0, "experiments/decoding_core")
from compare_cores import old_drafter_folder
from transformers import AutoModelForCausalLM
from transformers.dynamic_module_utils import get_class_from_dynamic_module

import slimspec_hf
from slimspec_hf import verification_slimspec as V
from slimspec_hf.evaluation.batching import left_padded_batch, new_token_counts
from slimspec_hf.evaluation.benchmark import default_questions_path, load_questions
from slimspec_hf.paths import embedded_drafter_dir


torch.set_num_threads(1)
target, tok = slimspec_hf.load_embedded_target(dtype="bfloat16")
new = AutoModelForCausalLM.from_pretrained(embedded_drafter_dir(), dtype=target.dtype)
folder = old_drafter_folder("2a643f1", Path(tempfile.mkdtemp()))
old = get_class_from_dynamic_module("modeling_slimspec.SlimSpecDrafterForCausalLM", str(folder)).from_pretrained(
    folder, dtype=target.dtype
)
gather_commit = V.TargetSlots.commit


def mask_commit(self, cache, positions, keeps):
    width = positions.shape[1]
    accepted = torch.zeros((len(keeps), width), dtype=torch.bool)
    for i, keep in enumerate(keeps):
        accepted[i, keep] = True
    last = max(int(keep.max()) + 1 for keep in keeps)
    if last < width:
        cache.crop(-(width - last))
    self.contiguous = False
    self.valid = torch.cat([self.valid, accepted[:, :last]], dim=1)
    self.positions = torch.cat([self.positions, positions[:, :last].cpu()], dim=1)


qs = list(load_questions(default_questions_path("mt_bench"), dataset="mt_bench"))
qs = [q for i, q in enumerate(qs) if i % 10 < 3][:24]
batches = [left_padded_batch(tok, [q["prompt"] for q in qs[i : i + 4]], target.device) for i in range(0, 24, 4)]
systems = {"new-gather": (new, gather_commit), "new-mask": (new, mask_commit), "old": (old, None)}
tot = {k: [0, 0.0, 0] for k in systems}
names = list(systems)
for i, b in enumerate(batches):
    for name in names[i % 3 :] + names[: i % 3]:
        d, commit = systems[name]
        if commit is not None:
            V.TargetSlots.commit = commit
        t = time.perf_counter()
        out = target.generate(
            **b, assistant_model=d, max_new_tokens=128, do_sample=False, pad_token_id=tok.eos_token_id
        )
        dt = time.perf_counter() - t
        r = tot[name]
        r[0] += sum(new_token_counts(out, b["input_ids"].shape[1], {tok.eos_token_id}))
        r[1] += dt
        r[2] += d.last_generation_stats.rounds
    print("batch", i, flush=True)
for name, (toks, dt, rounds) in tot.items():
    print(
        f"{name}: {toks} tokens, {dt:.1f} s, {toks / dt:.1f} tok/s, {rounds} row rounds, {toks / rounds:.3f} tok/row-round"
    )
