# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The dense-head SmolLM2 drafter that `slimspec convert --recover` is measured against: the shipped drafter's
backbone with a dense V×d head of full rank, fitted to the target.

The head is the least-squares map from the drafter's normed states to the target's logits of the token each state
drafts, over every drafting step: W = W_t · E[h_t sᵀ] · (E[s sᵀ] + λI)⁻¹ (s the drafter's head input, h_t the
target's final state whose logits the step is distilled to, W_t the target's LM head), on the target's answers of
chat training prompts (never MT-Bench). Then, optionally, head-only KL training (`config_dense_source.yaml`). A head
initialised from the target's own LM head instead starts at 0.3% top-1 on these states (its norms and the drafter's
differ), too far for a CPU budget.

    python experiments/recover/dense_source.py --out outputs/recover/dense-ls
"""

import argparse
import json

import torch

from slimspec_hf import SlimSpecDrafterConfig, SlimSpecDrafterForCausalLM
from slimspec_hf.targets import load_target
from slimspec_hf.training.data import load_training_dataset, prepare_dataset


@torch.no_grad()
def moments(drafter, target, rows, ttt_steps: int):
    """Σ s sᵀ (d, d), Σ h_t sᵀ (d_t, d) and the count, over assistant positions of `rows` and `ttt_steps` steps."""
    d, d_t = drafter.config.hidden_size, target.config.hidden_size
    ss, hs, n = torch.zeros(d, d, dtype=torch.float64), torch.zeros(d_t, d, dtype=torch.float64), 0
    layer_ids = list(drafter.config.target_layer_ids)
    for row in rows:
        ids = torch.tensor([row["input_ids"]])
        labels = torch.tensor(row["loss_mask"]).bool()
        T = ids.shape[1] - 1
        out = target(input_ids=ids, output_hidden_states=True)
        features = torch.cat([out.hidden_states[i][:, :T] for i in layer_ids], dim=-1)
        final = out.hidden_states[-1][0]  # (T + 1, d_t), post-norm: what the target's head reads
        embeds = drafter.get_input_embeddings()(ids[:, :T])
        for k, raw in enumerate(drafter.ttt_unroll(embeds, features, torch.arange(T)[None], min(ttt_steps, T - 1))):
            # step k at t drafts x_{t+k+2}, which the target predicts from its state at t + k + 1
            t = torch.arange(T - k - 1)
            keep = labels[t + k + 2]
            s = drafter.norm(raw)[0, t[keep]].double()
            h = final[t[keep] + k + 1].double()
            ss += s.T @ s
            hs += h.T @ s
            n += int(keep.sum())
    return ss, hs, n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drafter", default="drafters/smollm2-135m-instruct-slimspec")
    parser.add_argument("--data", default="data/smollm2-135m-instruct/extra_chat_greedy")
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--ttt-steps", type=int, default=4)
    parser.add_argument("--ridge", type=float, default=1e-4, help="λ, relative to the mean eigenvalue of E[s sᵀ]")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    target, tokenizer = load_target("embedded", dtype=torch.float32)
    shipped = SlimSpecDrafterForCausalLM.from_pretrained(args.drafter, dtype=torch.float32).attach_target(target)
    dataset = prepare_dataset(load_training_dataset(args.data), tokenizer, 768)
    rows = [dataset[i] for i in torch.randperm(len(dataset))[: args.rows].tolist()]
    ss, hs, n = moments(shipped, target, rows, args.ttt_steps)
    ridge = args.ridge * float(torch.diagonal(ss).mean()) * torch.eye(ss.shape[0], dtype=torch.float64)
    head_t = target.get_output_embeddings().weight.double()  # (V, d_t)
    weight = head_t @ torch.linalg.solve(ss + ridge, hs.T).T  # W_t · Σ h sᵀ · (Σ s sᵀ + λI)⁻¹, (V, d)
    config = SlimSpecDrafterConfig(**{**shipped.config.to_dict(), "head_type": "full", "head_rank": None})
    dense = SlimSpecDrafterForCausalLM(config).float()
    backbone = {k: v for k, v in shipped.state_dict().items() if not k.startswith("lm_head.")}
    assert dense.load_state_dict(backbone, strict=False).missing_keys == ["lm_head.weight"]
    with torch.no_grad():
        dense.lm_head.weight.copy_(weight.float())
    dense.generation_config = shipped.generation_config
    dense.save_pretrained(args.out)
    singular = torch.linalg.svdvals(weight.float())
    kept = float((singular[:72] ** 2).sum() / (singular**2).sum())
    record = {"rows": len(rows), "positions": n, "ridge": args.ridge, "energy_in_top_72": kept}
    (__import__("pathlib").Path(args.out) / "dense_source.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
