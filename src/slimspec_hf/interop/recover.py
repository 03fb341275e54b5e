# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`slimspec convert --recover`: a converted drafter's low-rank head fitted to the source drafter's dense head.

An SVD keeps the dense head's best rank-r approximation in weight space, which is not what decoding needs: the
drafter's top tokens on its own states. With the backbone frozen those states are fixed, so recovery is a head-only
distillation on them, with no training data and no retraining of the backbone:

1. the target answers a few hundred prompts (greedy; by default the packaged Spec-Bench prompts outside its MT-Bench
   category, which stays held out for measuring), and the converted drafter unrolls over each answer as in training
   (step 0 from the target's features, step k from its own step k-1 state), giving the head's input at every
   position and drafting step: `collect_head_states`;
2. the factors start from the activation-aware SVD for those states (E‖(W − W_up·W_down)h‖² minimal) and are fitted
   to KL(source ‖ low-rank) over the full vocabulary on random batches of them (Adam), for a wall-clock budget:
   `fit_low_rank_head`.

Both stages keep their work in a folder (`OUT.recover/`: the states, then the factors with Adam's moments), so a
run that is stopped, or a second call with more `--recover-seconds`, continues where the last one ended.
"""

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..heads_slimspec import LowRankHead
from ..modeling_slimspec import SlimSpecDrafterForCausalLM
from ..training.head_init import activation_aware_factors, second_moment
from ..utils import atomic_path, atomic_write_json


STATES_FILE = "states.safetensors"
FIT_FILE = "fit.safetensors"
FIT_STATE = "fit.json"
HELD_OUT = 0.1  # the fraction of states never fitted on, on which agreement is reported


@dataclass
class RecoverSettings:
    """How `convert --recover` fits the head (the CLI's `--recover-*` options)."""

    seconds: float = 1800.0  # wall-clock budget of the fit (states are collected before it starts)
    max_steps: int | None = None  # stop once the fit (resumes included) has taken this many steps; None: no limit
    num_prompts: int = 200
    max_new_tokens: int = 128
    ttt_steps: int = 4  # drafting steps whose states are collected
    batch_size: int = 512  # states per fitting step
    learning_rate: float = 1e-3
    seed: int = 0
    dtype: torch.dtype = torch.bfloat16  # of the fit's matrix products (the evaluations run in fp32)


def default_prompts(limit: int) -> list[str]:
    """The packaged Spec-Bench prompts outside its MT-Bench category (MT-Bench stays held out), first turns."""
    from ..evaluation.benchmark import PACKAGED_DATASETS, load_questions

    path = Path(__file__).resolve().parents[1] / "evaluation" / "data" / PACKAGED_DATASETS["spec_bench"]
    groups: dict[str, list[str]] = {}
    for question in load_questions(path, dataset="spec_bench"):
        if question["category"] != "mt_bench":
            groups.setdefault(question["category"], []).append(question["prompt"])
    mixed = [p for round_ in zip(*groups.values()) for p in round_]  # the categories in turn
    return mixed[:limit]


@torch.no_grad()
def target_answers(target, tokenizer, prompts: list[str], max_new_tokens: int, batch_size: int = 8, progress=None):
    """Each prompt (chat template) followed by the target's greedy answer, as 1-D token ids without padding: in a
    batch, each the same as the prompt answered alone (padded on the left, where a causal model's answer does not
    see the padding, and cut after its first end-of-sequence token, where the batch pads the rows still going)."""
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    device = next(target.parameters()).device
    eos = target.generation_config.eos_token_id
    eos_ids = torch.tensor([] if eos is None else [eos] if isinstance(eos, int) else list(eos), dtype=torch.long)
    sequences = []
    for start in range(0, len(prompts), batch_size):
        texts = [
            tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
            for p in prompts[start : start + batch_size]
        ]
        batch = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
        batch = batch.to(device)
        out = target.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False)
        width = batch["input_ids"].shape[1]
        for row, mask in zip(out, batch["attention_mask"]):
            answer = row[width:]
            ends = torch.isin(answer, eos_ids.to(answer.device)).nonzero()
            if ends.numel():
                answer = answer[: int(ends[0, 0]) + 1]
            sequences.append(torch.cat([row[:width][mask.bool()], answer]).cpu())
        if progress is not None:
            progress.update(len(texts))
    return sequences


@torch.no_grad()
def collect_head_states(drafter: SlimSpecDrafterForCausalLM, target, sequences, ttt_steps: int) -> torch.Tensor:
    """The LM head's inputs (N, d), fp32, of `drafter` unrolled `ttt_steps` drafting steps over each sequence: step
    0 reads the target's features at t, step k its own step k-1 state (the training-time-test unroll)."""
    layer_ids = list(drafter.config.target_layer_ids)
    states = []
    for ids in sequences:
        ids = ids.to(next(target.parameters()).device)[None]
        T = ids.shape[1] - 1  # positions t with a next token x_{t+1}
        if T < 2:
            continue
        out = target(input_ids=ids, output_hidden_states=True)
        features = torch.cat([out.hidden_states[i] for i in layer_ids], dim=-1)  # (1, T + 1, 3·d_t)
        embeds = drafter.get_input_embeddings()(ids).to(drafter.dtype)
        unrolled = drafter.ttt_unroll(embeds, features, torch.arange(T + 1, device=ids.device)[None], ttt_steps)
        # step k at t reads x_{t+k+1}: positions past T - k draft beyond the answer
        states += [drafter.norm(raw)[0, : T - k].float().cpu() for k, raw in enumerate(unrolled)]
    if not states:
        raise ValueError("Every recovery sequence is shorter than 3 tokens: nothing to collect states from.")
    return torch.cat(states)


def _kl_and_agreement(teacher_w, down, up, states, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean KL(softmax(W h) ‖ softmax(up·down·h)) and top-1 agreement over `states` (n, d); the products in `dtype`
    (bf16 runs the vocabulary-wide ones several times faster on CPUs with bf16 units), the softmaxes in fp32."""
    h = states.to(dtype)
    teacher = F.log_softmax((h @ teacher_w.to(dtype).T).float(), dim=-1)
    student = F.log_softmax(((h @ down.to(dtype).T) @ up.to(dtype).T).float(), dim=-1)
    kl = (teacher.exp() * (teacher - student)).sum(-1).mean()
    return kl, (teacher.argmax(-1) == student.argmax(-1)).float().mean()


@torch.no_grad()
def evaluate_head(teacher_w, down, up, states, chunk: int = 2048) -> dict:
    kl, agree = 0.0, 0.0
    for start in range(0, states.shape[0], chunk):
        part = states[start : start + chunk]
        k, a = _kl_and_agreement(teacher_w, down.float(), up.float(), part)
        kl, agree = kl + float(k) * part.shape[0], agree + float(a) * part.shape[0]
    return {"kl": kl / states.shape[0], "top1_agreement": agree / states.shape[0]}


def _resume_fit(work: Path, down, up, optimizer, generator) -> dict:
    """Loads a previous call's fit from `work` (its factors, Adam's moments and the batch sampler's state); returns
    its record."""
    from safetensors.torch import load_file

    record = json.loads((work / FIT_STATE).read_text())
    saved = load_file(str(work / FIT_FILE))
    down.data.copy_(saved["down"])
    up.data.copy_(saved["up"])
    optimizer.load_state_dict(_adam_state(optimizer, saved, record["adam_step"]))
    if "generator" in saved:  # the batches continue where the last call's ended (fits saved before: reseeded)
        generator.set_state(saved["generator"])
    return record


def fit_low_rank_head(
    head: LowRankHead,
    teacher_w: torch.Tensor,
    states: torch.Tensor,
    settings: RecoverSettings,
    work: Path,
    progress=None,
) -> dict:
    """Fits `head`'s factors to the dense `teacher_w` (V, d) on `states` (N, d) for `settings.seconds` (or up to
    `settings.max_steps` steps in all), resuming from `work` (and saving there every minute and at the end): the
    factors, Adam's moments and the batch sampler's state, so that a fit stopped and resumed takes the same steps as
    one that never stopped. Returns the fit's record: steps, seconds, and KL and top-1 agreement on the held-out
    states for the SVD start, the activation-aware start and the fitted head."""
    generator = torch.Generator().manual_seed(settings.seed)
    order = torch.randperm(states.shape[0], generator=generator)
    held = order[: max(1, int(HELD_OUT * states.shape[0]))]
    fit = order[held.numel() :]
    teacher_w = teacher_w.float()
    down = torch.nn.Parameter(head.down.weight.detach().float().clone())
    up = torch.nn.Parameter(head.up.weight.detach().float().clone())
    optimizer = torch.optim.Adam([down, up], lr=settings.learning_rate)
    if (work / FIT_STATE).is_file():  # a previous call's fit
        record = _resume_fit(work, down, up, optimizer, generator)
    else:
        svd = evaluate_head(teacher_w, head.down.weight, head.up.weight, states[held])
        start_down, start_up = activation_aware_factors(teacher_w.double(), second_moment(states[fit]), head.rank)
        down.data.copy_(start_down.float())
        up.data.copy_(start_up.float())
        aware = evaluate_head(teacher_w, down, up, states[held])
        record = {"steps": 0, "seconds": 0.0, "adam_step": 0, "svd": svd, "activation_svd": aware}
    started, last_save = time.perf_counter(), time.perf_counter()
    spent = record["seconds"]
    limit = math.inf if settings.max_steps is None else settings.max_steps
    while time.perf_counter() - started < settings.seconds and record["steps"] < limit:
        batch = fit[torch.randint(0, fit.numel(), (settings.batch_size,), generator=generator)]
        kl, _ = _kl_and_agreement(teacher_w, down, up, states[batch], settings.dtype)
        optimizer.zero_grad(set_to_none=True)
        kl.backward()
        optimizer.step()
        record["steps"] += 1
        if progress is not None:
            progress.set_postfix(kl=f"{float(kl.detach()):.3f}")
            progress.update(1)
        if time.perf_counter() - last_save > 60:
            record["seconds"] = spent + time.perf_counter() - started
            _save_fit(work, down, up, optimizer, generator, record)
            last_save = time.perf_counter()
    record["seconds"] = spent + time.perf_counter() - started
    record["recovered"] = evaluate_head(teacher_w, down, up, states[held])
    _save_fit(work, down, up, optimizer, generator, record)
    with torch.no_grad():
        head.down.weight.copy_(down.to(head.down.weight.dtype))
        head.up.weight.copy_(up.to(head.up.weight.dtype))
    return record


def _save_fit(work: Path, down, up, optimizer, generator: torch.Generator, record: dict) -> None:
    from safetensors.torch import save_file

    state = optimizer.state
    tensors = {"down": down.detach(), "up": up.detach(), "generator": generator.get_state()}
    for name, param in (("down", down), ("up", up)):
        if param in state:
            tensors[f"{name}.exp_avg"] = state[param]["exp_avg"]
            tensors[f"{name}.exp_avg_sq"] = state[param]["exp_avg_sq"]
            record["adam_step"] = int(state[param]["step"])
    with atomic_path(work / FIT_FILE) as tmp:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp))
    atomic_write_json(work / FIT_STATE, record)


def _adam_state(optimizer, saved: dict, step: int) -> dict:
    state = optimizer.state_dict()
    if "down.exp_avg" in saved:
        for index, name in enumerate(("down", "up")):
            state["state"][index] = {
                "step": torch.tensor(float(step)),
                "exp_avg": saved[f"{name}.exp_avg"],
                "exp_avg_sq": saved[f"{name}.exp_avg_sq"],
            }
    return state


def recover(
    drafter: SlimSpecDrafterForCausalLM,
    teacher_w: torch.Tensor,
    target,
    tokenizer,
    work: str | Path,
    settings: RecoverSettings | None = None,
    prompts: list[str] | None = None,
    show_progress: bool = True,
) -> dict:
    """Recovers `drafter`'s low-rank head (in place) against the source's dense head `teacher_w` (V, d): collects
    (or reloads from `work`) the head's states, then fits for `settings.seconds`. Returns the fit's record."""
    from safetensors.torch import load_file, save_file
    from tqdm.auto import tqdm

    settings = settings or RecoverSettings()
    if not isinstance(drafter.lm_head, LowRankHead):
        raise ValueError(f"--recover fits a low-rank head; this drafter's head is {drafter.config.head_type!r}.")
    if settings.seconds <= 0 or not math.isfinite(settings.seconds):
        raise ValueError(f"`--recover-seconds` must be a positive number of seconds, got {settings.seconds!r}.")
    if settings.max_steps is not None and settings.max_steps < 1:
        raise ValueError(f"`max_steps` must be a positive number of steps or None, got {settings.max_steps!r}.")
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    states_path = work / STATES_FILE
    if states_path.is_file():
        states = load_file(str(states_path))["states"]
    else:
        prompts = prompts if prompts is not None else default_prompts(settings.num_prompts)
        with tqdm(total=len(prompts), desc="target answers", disable=not show_progress) as bar:
            sequences = target_answers(target, tokenizer, prompts, settings.max_new_tokens, progress=bar)
        states = collect_head_states(drafter, target, sequences, settings.ttt_steps)
        with atomic_path(states_path) as tmp:
            save_file({"states": states.contiguous()}, str(tmp))
    with tqdm(desc="recovering the head", unit="step", disable=not show_progress) as bar:
        record = fit_low_rank_head(drafter.lm_head, teacher_w, states, settings, work, progress=bar)
    record["states"] = int(states.shape[0])
    return record


__all__ = ["RecoverSettings", "collect_head_states", "default_prompts", "fit_low_rank_head", "recover"]
