"""Helpers shared by the test modules, as transformers' `testing_utils.py`: tiny targets and drafters, the target
families, interpreters without the package or its extras, decoding and sampling checks, training references, EAGLE-3
checkpoints and a loopback Hub. Test modules import helpers from here, never from one another or from `conftest.py`
(`tests/test_package.py` checks it); `conftest.py` keeps the pytest hooks and fixtures.

Importing this module imports neither `slimspec_hf` nor an extra (each helper imports what it needs when called):
test_hub's scenarios import it in interpreters where the package is blocked.
"""

import base64
import functools
import hashlib
import json
import math
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import torch
import torch.nn.functional as F
from safetensors.torch import save_file


REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("SLIMSPEC_DATA", REPO_ROOT.parent / "shared" / "data"))


# -------------------------------------------------------------------------------------------------------------------
# Tiny Llama targets and drafters
# -------------------------------------------------------------------------------------------------------------------


def tiny_target_config(**overrides):
    from transformers import LlamaConfig

    values = dict(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=None,
        bos_token_id=None,
        pad_token_id=None,
    )
    values.update(overrides)
    return LlamaConfig(**values)


def make_tiny_target(seed: int = 0, **overrides):
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(tiny_target_config(**overrides)).eval()


def make_tiny_drafter(target, seed: int = 1, **overrides):
    from slimspec_hf import SlimSpecDrafterConfig, SlimSpecDrafterForCausalLM

    torch.manual_seed(seed)
    overrides.setdefault("target_layer_ids", [1, 3, 5])
    config = SlimSpecDrafterConfig.from_target_config(target.config, **overrides)
    return SlimSpecDrafterForCausalLM(config).eval().attach_target(target)


def make_char_tokenizer():
    """A character-level fast tokenizer over printable ASCII (ids < 128, "</s>" = 1), for tiny targets."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "</s>": 1, **{chr(c): i + 2 for i, c in enumerate(range(32, 127))}}  # 97 ids < 128
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="</s>")


# -------------------------------------------------------------------------------------------------------------------
# Target families
# -------------------------------------------------------------------------------------------------------------------


# Tiny random targets of every family the paper and the package serve: full attention (Llama, Qwen3), mixture of
# experts (Qwen3-MoE), and sliding-window or mixed layers (GPT-OSS, Mistral, Gemma-3). Windows are smaller than the
# prompts the tests use, so that they matter.


WINDOW = 6  # sliding window of the SWA families: shorter than the tests' prompts

FAMILIES = ("llama", "qwen3", "qwen3_moe", "gpt_oss", "mistral", "gemma3")
SLIDING_FAMILIES = ("gpt_oss", "mistral", "gemma3")


def family_config(family: str, vocab_size: int = 128, **overrides):
    import transformers

    common = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=512,
        eos_token_id=None,
        bos_token_id=None,
        pad_token_id=None,
        tie_word_embeddings=False,
    )
    extra = {
        "llama": {},
        "qwen3": {},
        "qwen3_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1),
        "gpt_oss": dict(
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=WINDOW,
            layer_types=["sliding_attention", "full_attention"] * 3,
        ),
        "mistral": dict(sliding_window=WINDOW),
        "gemma3": dict(
            sliding_window=WINDOW,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2,
            query_pre_attn_scalar=8,
            final_logit_softcapping=30.0,
        ),
    }[family]
    classes = {
        "llama": "LlamaConfig",
        "qwen3": "Qwen3Config",
        "qwen3_moe": "Qwen3MoeConfig",
        "gpt_oss": "GptOssConfig",
        "mistral": "MistralConfig",
        "gemma3": "Gemma3TextConfig",
    }
    values = {**common, **extra, **overrides}
    return getattr(transformers, classes[family])(**values)


def make_family_target(family: str, seed: int = 0, vocab_size: int = 128, **overrides):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    config = family_config(family, vocab_size=vocab_size, **overrides)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    for parameter in model.parameters():  # random init with a spread that makes the outputs depend on attention
        if parameter.dim() > 1:
            torch.nn.init.normal_(parameter, std=0.2)
    return model


# -------------------------------------------------------------------------------------------------------------------
# Interpreters without the package or without the extras
# -------------------------------------------------------------------------------------------------------------------


# What a Hub user without this package runs: `slimspec_hf` cannot be imported, offline, a fresh HF cache.
_BLOCK_PACKAGE = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "slimspec_hf" or name.startswith("slimspec_hf."):
            raise ImportError("slimspec_hf is blocked in this test")
sys.meta_path.insert(0, Block())
"""


def run_without_package(script: str, tmp_path, timeout: int = 300) -> str:
    """Runs `script` in a fresh Python where `slimspec_hf` cannot be imported (offline, its own HF cache);
    returns its stdout, failing the test with its stderr if it printed no `REMOTE-OK`."""
    import subprocess
    import sys
    import textwrap

    env = dict(os.environ, HF_HOME=str(tmp_path / "hf_home"), HF_HUB_OFFLINE="1")
    code = _BLOCK_PACKAGE + textwrap.dedent(script)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)
    assert "REMOTE-OK" in result.stdout, result.stderr[-3000:]
    return result.stdout


# What a user with the core install only has: the extras' packages look uninstalled (transformers asks
# `importlib.util.find_spec`, imports fail). pyyaml stays: transformers itself requires it.
_BLOCK_EXTRAS = """
import importlib.abc, importlib.util, sys
EXTRAS = {"trl", "peft", "accelerate", "datasets", "jinja2", "evaluate", "matplotlib", "gguf"}
_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, package=None: (
    None if name.split(".")[0] in EXTRAS else _find_spec(name, package)
)
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in EXTRAS:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
"""


def run_with_core_only(script: str, tmp_path, timeout: int = 300):
    """Runs `script` in a fresh Python where only the core install's packages can be imported (the extras' are
    blocked); returns the finished process (stdout, stderr, returncode)."""
    import subprocess
    import sys
    import textwrap

    env = dict(os.environ, HF_HOME=str(tmp_path / "hf_home"), HF_HUB_OFFLINE="1", SLIMSPEC_CACHE=str(tmp_path / "c"))
    code = _BLOCK_EXTRAS + textwrap.dedent(script)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)


# -------------------------------------------------------------------------------------------------------------------
# Decoding: drafters that know the target, and checks of the drafter's state
# -------------------------------------------------------------------------------------------------------------------


HEAD_CONFIGS = {
    "low_rank": {"head_type": "low_rank", "head_rank": 4},
    "full": {"head_type": "full"},
    "trimmed": {"head_type": "trimmed", "draft_vocab_size": 40},
    "target": {"head_type": "target"},
}


def make_drafter_for(target, head, **kwargs):
    drafter = make_tiny_drafter(target, **HEAD_CONFIGS[head], **kwargs)
    if head == "trimmed":
        drafter.lm_head.set_token_ids(torch.arange(40) * 3, dense_weight=target.lm_head.weight)
    return drafter


# -- a target whose greedy continuation is "next token = this token + 1", and a drafter that mostly knows it ----
# Attention-dead (the output depends on the last token only): for bookkeeping tests (statistics, settings, sources),
# never for the target's cache, masks or rollback — the live target below is for those.


def make_counting_target(vocab_size=128, eos_token_id=None):
    """Fourier token embeddings, attention/MLP outputs zeroed: the residual is the token's embedding and the
    LM head row y is the embedding of y - 1, so greedy decoding counts upwards (mod V)."""
    target = make_tiny_target(seed=3, vocab_size=vocab_size, eos_token_id=eos_token_id, num_key_value_heads=4)
    angles = 2 * math.pi * torch.arange(vocab_size)[:, None] * torch.arange(1, 17)[None, :] / vocab_size
    emb = torch.cat([angles.cos(), angles.sin()], dim=-1)  # (V, 32)
    with torch.no_grad():
        target.model.embed_tokens.weight.copy_(emb)
        target.lm_head.weight.copy_(emb.roll(1, dims=0))
        for layer in target.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    target.generation_config.eos_token_id = eos_token_id
    return target


def make_counting_drafter(target):
    from slimspec_hf import SlimSpecDrafterConfig

    config = SlimSpecDrafterConfig.from_target_config(target.config, target_layer_ids=[1, 3, 5])
    return _drafter_classes()["CountingDrafter"](config).eval().attach_target(target)


# -- a live target, and a drafter that knows its greedy output (partly) ---------------------------------------------
# The counting target's output depends on the last token only (attention is dead), so it cannot tell a right target
# cache, tree mask or rollback from a wrong one. The greedy identity tests run on a live target instead — every
# output depends on the whole context through attention — with `OracleDrafter`, right often enough that rounds
# accept deep paths and wrong often enough that deep drafts are rejected (so the caches are rolled back).


def make_live_target(seed: int = 0, eos_token_id=None, **overrides):
    """A tiny random Llama (weights of std 0.2): changing any earlier token changes its greedy continuation."""
    target = make_family_target("llama", seed=seed, eos_token_id=eos_token_id, **overrides)
    target.generation_config.eos_token_id = eos_token_id
    return target


LIVE_EOS = 40  # a token the live target's greedy continuations reach mid-way, for some prompts


def make_oracle_drafter(target):
    from slimspec_hf import SlimSpecDrafterConfig

    torch.manual_seed(1)
    config = SlimSpecDrafterConfig.from_target_config(target.config, target_layer_ids=[1, 3, 5])
    return _drafter_classes()["OracleDrafter"](config).eval().attach_target(target)


def real_tokens(ids: torch.Tensor, mask: torch.Tensor | None = None) -> list[int]:
    """A row's tokens without its left padding."""
    return ids[mask.bool()].tolist() if mask is not None else ids.tolist()


def fresh_drafter_state(target, drafter, ids: list[int]) -> torch.Tensor:
    """The drafter's state (d,) at the second-to-last token of `ids`, from scratch: one target forward over `ids`
    (without a cache) for the features, one drafter forward over them (without a cache)."""
    tokens = torch.tensor([ids])
    with torch.no_grad():
        hidden = target(tokens, output_hidden_states=True).hidden_states
        features = torch.cat([hidden[i] for i in drafter.config.target_layer_ids], dim=-1)[:, :-1]  # (1, n - 1, 3d)
        out = drafter(input_ids=tokens[:, 1:], target_features=features, position_ids=torch.arange(len(ids) - 1)[None])
    return out.hidden_states[0, -1]


class FreshLevels:
    """The drafter's state (d,) and logits (V,) at the last node of a tree `path` drafted below the last token of
    `ids`, from scratch and without a cache: one target forward over `ids` for the features, then one drafter forward
    over every committed position (the target's features) and the path (each node fed its parent's state, computed
    the same way), at positions 0, 1, ... (no padding). Remembers the features and states it computed."""

    def __init__(self, target, drafter):
        self.target, self.drafter = target, drafter
        self.features: dict[tuple, torch.Tensor] = {}  # ids -> the fused target features (1, n - 1, d)
        self.states: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}  # (ids, path) -> (state, logits)

    @torch.no_grad()
    def __call__(self, ids: list[int], path: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        key = (tuple(ids), tuple(path))
        if key in self.states:
            return self.states[key]
        tokens = torch.tensor([ids])
        if key[0] not in self.features:
            hidden = self.target(tokens, output_hidden_states=True).hidden_states
            layers = torch.cat([hidden[i] for i in self.drafter.config.target_layer_ids], dim=-1)
            self.features[key[0]] = self.drafter.fuse(layers[:, :-1])
        fed = [self(ids, path[:depth])[0][None, None] for depth in range(len(path))]  # each node's parent's state
        inputs = torch.cat([tokens[:, 1:], torch.tensor([path], dtype=torch.long).view(1, -1)], dim=-1)
        states = torch.cat([self.features[key[0]], *fed], dim=1)  # (1, n - 1 + depth, d)
        out = self.drafter(input_ids=inputs, hidden_states=states, position_ids=torch.arange(inputs.shape[1])[None])
        self.states[key] = out.hidden_states[0, -1], out.logits[0, -1]
        return self.states[key]


class DraftWatch:
    """Watches every round of the `generate()` calls it is installed for (batch 1 or batched): the drafter's state
    after each commit of accepted positions (`check` compares it with `fresh_drafter_state`: a drafter cache that
    kept drafted positions, or took the features of the wrong rows, changes only the acceptance, never the output),
    with `levels` every tree level's states and logits of every row (compared with `FreshLevels`: a level
    that attends to padding or counts it in its positions changes only the drafts), and the deepest node each round
    verifies (never past the length limit)."""

    def __init__(self, monkeypatch, levels: bool = False):
        from slimspec_hf import decoding_slimspec, drafting_slimspec

        self.commits: list[tuple[list[int], torch.Tensor]] = []  # (real tokens up to the committed one, state)
        self.levels: list[
            tuple[list[int], list[int], torch.Tensor, torch.Tensor]
        ] = []  # (tokens, path, state, logits)
        self.rounds: list[tuple[int, int, int]] = []  # (sequence length, deepest verified node, max_length)
        self.checked = self.checked_levels = 0  # commits / level nodes checked so far
        commit, verify = drafting_slimspec.DrafterState.commit, decoding_slimspec.SpeculativeDecoder.verify
        forward_level = drafting_slimspec.DrafterState.forward_level

        def watched_commit(state, seqs):
            logits, hidden = commit(state, seqs)
            for i, seq in enumerate(seqs):
                end = state.committed[i] + 1  # the state at position committed - 1: input token `committed`
                self.commits.append((real_tokens(seq.ids[0, :end], seq.key_mask[:end]), hidden[i].clone()))
            return logits, hidden

        def watched_level(state, seqs, rows, trees, frontiers, level):
            logits = forward_level(state, seqs, rows, trees, frontiers, level)
            for i, seq, tree, frontier, row_logits in zip(rows, seqs, trees, frontiers, logits):
                assert state.committed[i] == seq.length - 1  # every position but the root's is in the cache
                tokens = real_tokens(seq.ids[0], seq.key_mask)
                for f, node in enumerate(frontier):
                    self.levels.append(
                        (tokens, tree.path_tokens(node), tree.states[node].clone(), row_logits[f].clone())
                    )
            return logits

        def depth(tree):
            return max((tree.depths[n] for n in tree.kept), default=0)

        def watched_verify(decoder, trees):
            for b, tree in zip(decoder.active, trees):
                self.rounds.append((decoder.seqs[b].length, depth(tree), decoder.max_length))
            return verify(decoder, trees)

        monkeypatch.setattr(drafting_slimspec.DrafterState, "commit", watched_commit)
        monkeypatch.setattr(decoding_slimspec.SpeculativeDecoder, "verify", watched_verify)
        if levels:
            monkeypatch.setattr(drafting_slimspec.DrafterState, "forward_level", watched_level)

    def check(self, target, drafter) -> None:
        """Every commit's state (and every level node's state and logits) equals a fresh drafter's; no verified node
        lies past the last token the call may append (its bonus token comes after it); then forgets what it saw."""
        for length, deepest, max_length in self.rounds:
            assert length + deepest < max_length, (length, deepest, max_length)
        for ids, state in self.commits:
            torch.testing.assert_close(state, fresh_drafter_state(target, drafter, ids), rtol=1e-4, atol=1e-4)
        fresh = FreshLevels(target, drafter)
        for ids, path, state, logits in self.levels:
            torch.testing.assert_close((state, logits), fresh(ids, path), rtol=1e-4, atol=1e-4)
        self.checked += len(self.commits)
        self.checked_levels += len(self.levels)
        self.commits.clear()
        self.levels.clear()
        self.rounds.clear()


def assert_deep_drafts_accepted_and_rejected(stats, depth: int = 2) -> None:
    """The rounds accepted AND rejected drafts at the positions from 1 to `depth` (1-based): rollback happened."""
    rates = stats.per_position_acceptance[:depth]
    assert len(rates) == depth and all(0 < rate < 1 for rate in rates), rates


def __getattr__(name: str):
    """`CountingDrafter` and `OracleDrafter` subclass the drafter, so they are defined on first use: importing this
    module imports no `slimspec_hf` (test_hub's scenarios import it where the package is blocked)."""
    if name in ("CountingDrafter", "OracleDrafter"):
        return _drafter_classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _drafter_classes() -> dict[str, type]:
    from slimspec_hf import SlimSpecDrafterForCausalLM

    class CountingDrafter(SlimSpecDrafterForCausalLM):
        """Runs the real drafter (cache, positions, masks), then predicts `token + 1` — except after multiples of
        `wrong_every`, where it proposes a wrong token, so that rounds end in partial acceptance."""

        wrong_every = 7

        def forward(self, input_ids=None, **kwargs):
            out = super().forward(input_ids=input_ids, **kwargs)
            ids = input_ids[:, -out.logits.shape[1] :]
            guess = (ids + 1) % self.config.vocab_size
            guess = torch.where(ids % self.wrong_every == 0, (ids + 5) % self.config.vocab_size, guess)
            out.logits = torch.nn.functional.one_hot(guess, self.config.vocab_size).float() * 20
            return out

    class OracleDrafter(SlimSpecDrafterForCausalLM):
        """Runs the real drafter (its cache, masks and positions: `DraftWatch` checks its states), then proposes
        from what it was taught (`teach`): the token that followed token x at position p (x fed at p predicts the
        token after it, as the drafter's inputs are shifted by one). Its first choice is right at 5 positions in 8,
        its runner-up at 2 more (a tree finds it, a chain does not) and neither at the last, so rounds both accept
        and reject deep drafts."""

        def __init__(self, config):
            super().__init__(config)
            self.known: dict[tuple[int, int], int] = {}  # (position, token) -> the token after it

        def teach(self, *sequences) -> "OracleDrafter":
            """`sequences`: the target's greedy outputs (real tokens only, no padding), each a list of token ids."""
            self.known = {(p, s[p + 1]): s[p + 2] for s in sequences for p in range(len(s) - 2)}
            return self

        def forward(self, input_ids=None, position_ids=None, **kwargs):
            out = super().forward(input_ids=input_ids, position_ids=position_ids, **kwargs)
            vocab, n = out.logits.shape[-1], out.logits.shape[1]
            if position_ids is None:
                position_ids = torch.arange(input_ids.shape[1])[None].expand(input_ids.shape[0], -1)
            first, second = [], []
            for p, x in zip(position_ids[:, -n:].flatten().tolist(), input_ids[:, -n:].flatten().tolist()):
                right = self.known.get((p, x), (7 * x + p) % vocab)  # a context it was not taught: some token
                kind = (3 * p + 5 * x) % 8
                wrong = (right + 1) % vocab
                first.append(right if kind < 5 else wrong)
                second.append(wrong if kind < 5 else right if kind < 7 else (right + 2) % vocab)
            shape = out.logits.shape[:2]
            first, second = torch.tensor(first).view(shape), torch.tensor(second).view(shape)
            logits = F.one_hot(first, vocab).float() * 10 + F.one_hot(second, vocab).float() * 9
            out.logits = logits.to(out.logits.device)
            return out

    return {"CountingDrafter": CountingDrafter, "OracleDrafter": OracleDrafter}


# -------------------------------------------------------------------------------------------------------------------
# Sampling: exact marginals and a chi-square test
# -------------------------------------------------------------------------------------------------------------------


def exact_marginals(target, prompt, steps):
    """Exact distribution of each of the first `steps` sampled tokens (temperature 1), by enumeration."""
    vocab = target.config.vocab_size
    seqs, weights = prompt.clone(), torch.ones(1)
    marginals = []
    for _ in range(steps):
        with torch.no_grad():
            probs = target(seqs).logits[:, -1].float().softmax(-1)  # (n, V)
        joint = weights[:, None] * probs
        marginals.append(joint.sum(0))
        seqs = torch.cat([seqs.repeat_interleave(vocab, 0), torch.arange(vocab).repeat(seqs.shape[0])[:, None]], 1)
        weights = joint.flatten()
    return marginals


def chi_square(counts, expected_probs):
    n = counts.sum()
    expected = expected_probs * n
    keep = expected >= 5
    other = (counts[~keep].sum(), expected[~keep].sum())
    stat = ((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum()
    if other[1] > 0:
        stat = stat + (other[0] - other[1]) ** 2 / other[1]
    return float(stat), int(keep.sum())  # degrees of freedom = cells - 1 (with the pooled cell)


# chi-square 0.999 quantiles for df = 1..20
CHI2_999 = [
    10.83,
    13.82,
    16.27,
    18.47,
    20.52,
    22.46,
    24.32,
    26.12,
    27.88,
    29.59,
    31.26,
    32.91,
    34.53,
    36.12,
    37.70,
    39.25,
    40.79,
    42.31,
    43.82,
    45.31,
]


# -------------------------------------------------------------------------------------------------------------------
# Training: tiny data and arguments, naive references of the losses
# -------------------------------------------------------------------------------------------------------------------


def tiny_rows(num=24, seed=0, vocab=128):
    import datasets

    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(num):
        n = int(torch.randint(14, 30, (1,), generator=g))
        ids = torch.randint(0, vocab, (n,), generator=g).tolist()
        rows.append({"input_ids": ids, "loss_mask": [0] * 4 + [1] * (n - 4)})
    return datasets.Dataset.from_list(rows)


def tiny_args(tmp_path, **overrides):
    from slimspec_hf.training.config import SlimSpecConfig

    values = dict(
        output_dir=str(tmp_path / "out"),
        max_steps=30,
        per_device_train_batch_size=4,
        learning_rate=5e-3,
        lr_scheduler_type="constant",
        logging_steps=10,
        report_to="none",
        save_strategy="no",
        ttt_steps=3,
        target_layer_ids=[1, 3, 5],
        use_cpu=True,
        kl_chunk_size=16,
        feature_cache_dir=str(tmp_path / "cache"),
        max_grad_norm=1.0,
        disable_tqdm=True,
        seed=0,
    )
    values.update(overrides)
    return SlimSpecConfig(**values)


def naive_objective(loss_type, p, logq, kl_weight=0.0, eta=3.0, greedy_token=None):
    """Per row, from the (…, V) teacher probabilities p and student log-probabilities (autograd does the rest):
    α = Σ min(p, q) is the probability that speculative sampling accepts a draft from q. `lk_greedy` scores the
    target's greedy token `greedy_token` (default argmax p; -1: a token the drafter cannot draft, no loss)."""
    q = logq.exp()
    kl = (p * (p.clamp_min(1e-300).log() - logq)).sum(-1)
    if loss_type == "kl":
        return kl
    if loss_type == "lk_greedy":
        if greedy_token == -1:
            lk = torch.zeros_like(kl)
        else:
            token = p.argmax(-1, keepdim=True) if greedy_token is None else torch.tensor([greedy_token])
            lk = -logq.gather(-1, token).squeeze(-1)
    else:
        alpha = torch.minimum(p, q).sum(-1)
        if loss_type == "lk_alpha":
            lk = -alpha.clamp_min(1e-6).log()
        else:
            lam = torch.exp(-eta * alpha).detach()
            lk = lam * kl + (1 - lam) * (1 - alpha)
    return (1 - kl_weight) * lk + kl_weight * kl


class GrowingCache:
    """`SlimSpecDrafterCache`'s interface, growing by concatenation instead of writing into a preallocated buffer, so
    that autograd runs through the drafter's cached forwards (the gradients of `naive_ttt_loss`)."""

    def __init__(self):
        self.keys = self.values = None

    def get_seq_length(self) -> int:
        return 0 if self.keys is None else self.keys.shape[2]

    def update(self, keys, values):
        if self.keys is not None:
            keys, values = torch.cat([self.keys, keys], dim=2), torch.cat([self.values, values], dim=2)
        self.keys, self.values = keys, values
        return keys, values


def naive_ttt_loss(
    drafter, teacher_logits, ids, attention_mask, loss_mask, features, steps, decay, top_k=0, top_w=0.0, lk=None
):
    """The trainer's loss written the way decoding drafts: one row, one position, one step at a time.

    Per real position t of a row (padding dropped, positions counted from its first real token): the drafter's cached
    forward over the prefix (the target's features at 0..t, tokens x_1..x_{t+1}: `DrafterState.commit`), then steps
    k = 1.. each fed the previous step's own state, the token x_{t+k+1} and RoPE position t + k (`TreeDrafter.forward`
    on a chain). Step k's logits predict x_{t+k+2}: its teacher is `teacher_logits` (B, T, V) at t + k + 1, counted
    where x_{t+k+2} is an assistant token. KL(p ‖ q) over the tokens the drafter can draft (all of them, or a trimmed
    head's K), plus `top_w` · (−Σ_{top_k of p} p log q), or the LK loss `lk` (`loss_type`, `lk_kl_weight`, `lk_eta`;
    `naive_objective`); per step the mean over its rows, weighted `decay**k`.
    Returns (loss, per-step KL, per-step top-1 agreement count, per-step row count)."""
    kl_rows, objective_rows, correct = [[] for _ in range(steps)], [[] for _ in range(steps)], [0] * steps
    for b in range(ids.shape[0]):
        real = attention_mask[b].bool()
        row_ids, row_features, row_teacher, row_label = (
            ids[b, real],
            features[b, real],
            teacher_logits[b, real],
            loss_mask[b, real],
        )
        n = row_ids.shape[0]
        for t in range(n - 2):
            cache = GrowingCache()
            out = drafter(
                input_ids=row_ids[None, 1 : t + 2],
                target_features=row_features[None, : t + 1],
                position_ids=torch.arange(t + 1)[None],
                cache=cache,
                use_cache=True,
            )
            logits, state = out.logits[0, -1], out.hidden_states[:, -1:]
            for k in range(steps):
                s = t + k + 1  # the teacher's position
                if s + 1 >= n:
                    break
                if k:
                    out = drafter(
                        input_ids=row_ids[None, s : s + 1],  # x_{t+k+1}
                        hidden_states=state,
                        position_ids=torch.tensor([[t + k]]),
                        cache=cache,
                        use_cache=True,
                    )
                    logits, state = out.logits[0, -1], out.hidden_states
                if not row_label[s + 1]:
                    continue
                kept = torch.isfinite(logits)  # a trimmed head scores only its K tokens
                p = torch.softmax(row_teacher[s][kept].double(), -1)
                logq = torch.log_softmax(logits[kept].double(), -1)
                kl = (p * (p.log() - logq)).sum()
                top_p, top_ids = p.topk(top_k) if top_k else (p[:0], torch.zeros(0, dtype=torch.long))
                kl_rows[k].append(kl)
                kept_ids = kept.nonzero().flatten()  # the target's greedy token among the draftable ones
                greedy = (kept_ids == row_teacher[s].argmax()).nonzero().flatten().tolist() or [-1]
                row_objective = kl if lk is None else naive_objective(lk[0], p, logq, *lk[1:], greedy_token=greedy[0])
                objective_rows[k].append(row_objective - top_w * (top_p * logq[top_ids]).sum())
                correct[k] += int(logits.argmax() == row_teacher[s].argmax())
    loss = sum(decay**k * torch.stack(objective_rows[k]).mean() for k in range(steps) if objective_rows[k])
    step_kl = torch.stack([torch.stack(r).mean() if r else torch.zeros((), dtype=torch.float64) for r in kl_rows])
    return loss, step_kl, correct, [len(r) for r in kl_rows]


# -------------------------------------------------------------------------------------------------------------------
# EAGLE-3 interop: an independent reference forward and synthetic checkpoints
# -------------------------------------------------------------------------------------------------------------------


ATOL = 1e-5
L = 8  # target layers: EAGLE-3's default {2, L//2, L-3} = {2, 4, 5} are distinct
PREFIX = {"eagle": "midlayer.", "speculators": "layers.0."}


def convert_main(argv):  # through the `slimspec` error boundary, as a user runs it
    from slimspec_hf import cli

    return cli.main(["convert", *argv])


def export_main(argv):
    from slimspec_hf import cli

    return cli.main(["export", *argv])


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rope(x, theta):  # x (B, H, T, hd), positions 0..T-1, rotate-half convention
    hd, T = x.shape[-1], x.shape[-2]
    inv = 1.0 / theta ** (torch.arange(0, hd, 2).float() / hd)
    ang = torch.arange(T).float()[:, None] * inv[None]
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    return x * cos + torch.cat([-x[..., hd // 2 :], x[..., : hd // 2]], -1) * sin


def reference_eagle3(sd, prefix, cfg, emb, h, token_ids, vocab_size, norm_before_residual=False):
    """An independent plain-torch forward of the *source* EAGLE-3 drafter, written from the format descriptions
    (it uses nothing from slimspec_hf). Returns (full-vocab logits with -inf outside the draft vocab, pre-norm output
    fed back)."""
    p, eps, H, Hkv = prefix, cfg["rms_norm_eps"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    if h.shape[-1] != emb.shape[-1]:
        h = h @ sd["fc.weight"].T  # fuse cat(h_low, h_mid, h_high)
    hn = rms_norm(h, sd[p + "hidden_norm.weight"], eps)
    residual = hn if norm_before_residual else h
    x = torch.cat([rms_norm(emb, sd[p + "input_layernorm.weight"], eps), hn], -1)  # embedding first
    B, T, _ = x.shape
    q = (x @ sd[p + "self_attn.q_proj.weight"].T).view(B, T, H, -1).transpose(1, 2)
    k = (x @ sd[p + "self_attn.k_proj.weight"].T).view(B, T, Hkv, -1).transpose(1, 2)
    v = (x @ sd[p + "self_attn.v_proj.weight"].T).view(B, T, Hkv, -1).transpose(1, 2)
    q, k = _rope(q, cfg["rope_theta"]), _rope(k, cfg["rope_theta"])
    k, v = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
    att = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    att = att.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")).softmax(-1)
    h = residual + (att @ v).transpose(1, 2).reshape(B, T, -1) @ sd[p + "self_attn.o_proj.weight"].T
    m = rms_norm(h, sd[p + "post_attention_layernorm.weight"], eps)
    h = (
        h
        + (F.silu(m @ sd[p + "mlp.gate_proj.weight"].T) * (m @ sd[p + "mlp.up_proj.weight"].T))
        @ sd[p + "mlp.down_proj.weight"].T
    )
    draft_logits = rms_norm(h, sd["norm.weight"], eps) @ sd["lm_head.weight"].T  # (B, T, K)
    logits = draft_logits.new_full((B, T, vocab_size), float("-inf"))
    logits[..., token_ids] = draft_logits
    return logits, h


def layer_config(target, draft_vocab_size):
    tc = target.config
    return {
        "hidden_size": tc.hidden_size,
        "intermediate_size": 48,  # differs from the target's: must come from the checkpoint
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 1,
        "vocab_size": tc.vocab_size,
        "rms_norm_eps": 1e-5,
        "rope_theta": 5000.0,  # differs from the target's
        "max_position_embeddings": 256,
        "hidden_act": "silu",
        "draft_vocab_size": draft_vocab_size,
    }


def random_weights(fmt, target, draft_vocab_size, seed=0):
    g = torch.Generator().manual_seed(seed)
    d, inter, V = target.config.hidden_size, 48, target.config.vocab_size

    def w(*shape):
        return torch.randn(*shape, generator=g) * 0.2

    def norm():
        return 1 + 0.3 * torch.randn(d, generator=g)

    p = PREFIX[fmt]
    sd = {
        "fc.weight": w(d, 3 * d),
        p + "input_layernorm.weight": norm(),
        p + "hidden_norm.weight": norm(),
        p + "self_attn.q_proj.weight": w(32, 2 * d),
        p + "self_attn.k_proj.weight": w(16, 2 * d),
        p + "self_attn.v_proj.weight": w(16, 2 * d),
        p + "self_attn.o_proj.weight": w(d, 32),
        p + "post_attention_layernorm.weight": norm(),
        p + "mlp.gate_proj.weight": w(inter, d),
        p + "mlp.up_proj.weight": w(inter, d),
        p + "mlp.down_proj.weight": w(d, inter),
        "norm.weight": norm(),
        "lm_head.weight": w(draft_vocab_size, d),
    }
    token_ids = torch.arange(V)
    if draft_vocab_size < V:
        token_ids = torch.randperm(V, generator=g)[:draft_vocab_size].sort().values
        sd["d2t"] = token_ids - torch.arange(draft_vocab_size)
        t2d = torch.zeros(V, dtype=torch.bool)
        t2d[token_ids] = True
        sd["t2d"] = t2d
    return sd, token_ids


def write_checkpoint(folder, config, tensors):
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def eagle_checkpoint(tmp_path, target, draft_vocab_size=40, seed=0, **config_extra):
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        **layer_config(target, draft_vocab_size),
    }
    cfg.update(config_extra)
    sd, token_ids = random_weights("eagle", target, draft_vocab_size, seed)
    return write_checkpoint(tmp_path / "eagle", cfg, sd), cfg, sd, token_ids


def speculators_checkpoint(tmp_path, target, draft_vocab_size=None, seed=0, with_embedding=True, **config_extra):
    V = target.config.vocab_size
    draft_vocab_size = draft_vocab_size or V
    layer = {"model_type": "llama", **layer_config(target, draft_vocab_size)}
    layer.pop("draft_vocab_size")
    cfg = {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "transformer_layer_config": layer,
        "draft_vocab_size": draft_vocab_size,
        "norm_before_residual": False,
        "eagle_aux_hidden_state_layer_ids": [1, 3, 6],
        "speculators_config": {"algorithm": "eagle3", "proposal_methods": [], "verifier": {"name_or_path": None}},
    }
    cfg.update(config_extra)
    sd, token_ids = random_weights("speculators", target, draft_vocab_size, seed)
    if with_embedding:
        sd["embed_tokens.weight"] = target.get_input_embeddings().weight.detach().clone()
    return write_checkpoint(tmp_path / "spec", cfg, sd), cfg, sd, token_ids


def features(target, layer_ids, T=7, seed=3):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, target.config.vocab_size, (2, T + 1), generator=g)
    with torch.no_grad():
        out = target(ids[:, :-1], output_hidden_states=True)
    feats = torch.cat([out.hidden_states[i] for i in layer_ids], -1)  # (B, T, 3·d)
    emb = target.get_input_embeddings()(ids[:, 1:]).detach()  # embeddings of the next tokens
    return ids[:, 1:], feats, emb


def reference_config(cfg):
    return cfg.get("transformer_layer_config", cfg)


def assert_two_steps_match(drafter, sd, cfg, target, layer_ids, token_ids, norm_before_residual):
    """Step 1 from target features, step 2 fed each model's own pre-norm output: logits agree (−inf included)."""
    fmt = "speculators" if "transformer_layer_config" in cfg else "eagle"
    ids, feats, emb = features(target, layer_ids)
    V = target.config.vocab_size
    with torch.no_grad():
        out = drafter(input_ids=ids, target_features=feats)
        out2 = drafter(input_ids=ids, hidden_states=out.hidden_states)
        ref, ref_h = reference_eagle3(
            sd, PREFIX[fmt], reference_config(cfg), emb, feats, token_ids, V, norm_before_residual
        )
        ref2, _ = reference_eagle3(
            sd, PREFIX[fmt], reference_config(cfg), emb, ref_h, token_ids, V, norm_before_residual
        )
    for ours, theirs in ((out.logits, ref), (out2.logits, ref2)):
        assert torch.equal(torch.isinf(ours), torch.isinf(theirs))
        finite = torch.isfinite(theirs)
        torch.testing.assert_close(ours[finite], theirs[finite], atol=ATOL, rtol=0)
    return ref


# -------------------------------------------------------------------------------------------------------------------
# A loopback Hugging Face Hub
# -------------------------------------------------------------------------------------------------------------------


# A small Hugging Face Hub-compatible HTTP server for tests (standard library only).
#
# It implements what `huggingface_hub` 2.4 and `transformers` use to push and load models: repo creation, branches,
# YAML validation, the preupload and NDJSON commit endpoints (regular, non-LFS uploads only: preupload answers
# `uploadMode: "regular"` so no Xet/LFS transfer is attempted), repo info by revision, the tree listing and
# `HEAD`/`GET /{repo}/resolve/{revision}/{path}` with `X-Repo-Commit`, `ETag` and `Content-Length`. Errors carry
# `X-Error-Code` (`RepoNotFound`, `RevisionNotFound`, `EntryNotFound`) as the real Hub does, so the client raises its
# own typed errors.
#
# Revisions arrive URL-quoted (`refs%2Fpr%2F1`); every response has a Content-Length (HTTP/1.1 keep-alive). A server
# exception looks like a dropped connection to the client, which then retries for half a minute: handler exceptions
# are logged to stderr, answered with a 500 that says what failed, and kept in `HubServer.errors` for the tests.
#
#     with HubServer() as hub:          # 127.0.0.1, port 0
#         os.environ["HF_ENDPOINT"] = hub.url   # before huggingface_hub is imported


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob, as the Hub reports for regular (non-LFS) files."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Commit:
    oid: str
    parent: str | None
    title: str
    files: dict[str, bytes]
    date: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()))


@dataclass
class Repo:
    repo_id: str
    private: bool
    branches: dict[str, str] = field(default_factory=dict)  # name -> commit oid
    commits: dict[str, Commit] = field(default_factory=dict)

    def resolve(self, revision: str) -> Commit | None:
        if revision in self.branches:
            return self.commits[self.branches[revision]]
        if revision in self.commits:
            return self.commits[revision]
        if len(revision) >= 7 and all(c in "0123456789abcdef" for c in revision):
            matches = [c for oid, c in self.commits.items() if oid.startswith(revision)]
            if len(matches) == 1:
                return matches[0]
        return None


class HubError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, commit: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.commit = status, message, code, commit


class HubState:
    """Repos in memory; one lock serialises every request's view of them."""

    def __init__(self):
        self.repos: dict[str, Repo] = {}
        self.lock = threading.Lock()
        self._counter = 0

    def new_commit(self, repo: Repo, parent: str | None, title: str, files: dict[str, bytes]) -> Commit:
        self._counter += 1
        digest = hashlib.sha1(f"{repo.repo_id}\0{parent}\0{title}\0{self._counter}\0{time.time_ns()}".encode())
        for path in sorted(files):
            digest.update(path.encode() + b"\0" + files[path])
        commit = Commit(oid=digest.hexdigest(), parent=parent, title=title, files=files)
        repo.commits[commit.oid] = commit
        return commit

    def repo(self, repo_id: str) -> Repo:
        repo = self.repos.get(repo_id)
        if repo is None:
            raise HubError(404, f"Repository {repo_id} not found", "RepoNotFound")
        return repo

    def commit(self, repo: Repo, revision: str) -> Commit:
        commit = repo.resolve(revision)
        if commit is None:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return commit


MODEL_ACTIONS = {"revision", "tree", "preupload", "commit", "branch", "refs", "paths-info", "commits"}


class HubRequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "HubServer._Server"

    # -- plumbing ----------------------------------------------------------------------------------------------
    def log_message(self, format, *args):  # quiet by default; HubServer.requests keeps the trace
        pass

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None, head: bool = False) -> None:
        self.send_response(status)
        headers = dict(headers or {})
        headers.setdefault("Content-Type", "application/json")
        headers["Content-Length"] = str(len(body))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if body and not head:
            self.wfile.write(body)

    def _json(self, status: int, payload, headers: dict | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), headers)

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _dispatch(self, method: str) -> None:
        hub = self.server.hub
        self.server.requests.append(f"{method} {self.path}")
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        parts = url.path.strip("/").split("/")
        body = self._body() if method == "POST" else b""
        try:
            with hub.state.lock:
                self._route(method, parts, query, body)
        except HubError as err:
            headers = {"X-Error-Message": err.message}
            if err.code:
                headers["X-Error-Code"] = err.code
            if err.commit:
                headers["X-Repo-Commit"] = err.commit
            self._send(err.status, json.dumps({"error": err.message}).encode(), headers, head=method == "HEAD")
        except Exception as err:  # log it: the client would only see a dropped connection and retry
            trace = traceback.format_exc()
            hub.errors.append(f"{method} {self.path}: {trace}")
            print(f"[HubServer] {method} {self.path} failed:\n{trace}", file=sys.stderr, flush=True)
            self._send(500, json.dumps({"error": f"test hub server error: {err!r}"}).encode(), head=method == "HEAD")

    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_POST(self):
        self._dispatch("POST")

    # -- routes ------------------------------------------------------------------------------------------------
    def _route(self, method: str, parts: list[str], query: dict, body: bytes) -> None:
        if parts[:3] == ["api", "repos", "create"] and method == "POST":
            return self._create_repo(json.loads(body or b"{}"))
        if parts[:2] == ["api", "validate-yaml"] and method == "POST":
            return self._validate_yaml(json.loads(body or b"{}"))
        if parts[:2] == ["api", "whoami-v2"] and method == "GET":
            return self._json(200, {"type": "user", "name": "tester", "orgs": [], "auth": {"type": "access_token"}})
        if parts[:2] == ["api", "models"] and len(parts) >= 3:
            return self._model_api(method, parts[2:], query, body)
        # /{repo_id}/resolve/{revision}/{path}, repo ids with or without a namespace; dataset repos (seeded with
        # `HubServer.publish`) are served under /datasets/{org}/{name}/resolve/... and stored as "datasets/org/name"
        for i in (1, 2, 3):
            if len(parts) > i + 2 and parts[i] == "resolve" and method in ("GET", "HEAD"):
                return self._resolve(method, "/".join(parts[:i]), unquote(parts[i + 1]), parts[i + 2 :])
        raise HubError(404, f"test hub server: no route for {method} /{'/'.join(parts)}")

    def _model_api(self, method: str, rest: list[str], query: dict, body: bytes) -> None:
        split = 1 if len(rest) == 1 or rest[1] in MODEL_ACTIONS else 2
        repo_id, rest = "/".join(rest[:split]), rest[split:]
        state = self.server.hub.state
        repo = state.repo(repo_id)
        action = rest[0] if rest else None
        revision = unquote(rest[1]) if len(rest) > 1 else "main"
        if action is None and method == "GET":
            return self._model_info(repo, state.commit(repo, "main"))
        if action == "revision" and method == "GET":
            return self._model_info(repo, state.commit(repo, revision))
        if action == "tree" and method == "GET":
            path = "/".join(unquote(p) for p in rest[2:])
            return self._tree(repo, state.commit(repo, revision), path, query)
        if action == "preupload" and method == "POST":
            return self._preupload(state.commit(repo, revision), json.loads(body or b"{}"), query)
        if action == "commit" and method == "POST":
            return self._commit(repo, revision, body, query)
        if action == "branch" and method == "POST":
            return self._create_branch(repo, revision, json.loads(body or b"{}"))
        if action == "refs" and method == "GET":
            branches = [{"name": n, "ref": f"refs/heads/{n}", "targetCommit": oid} for n, oid in repo.branches.items()]
            return self._json(200, {"branches": branches, "tags": [], "converts": []})
        raise HubError(404, f"test hub server: no route for {method} /api/models/{repo_id}/{'/'.join(rest)}")

    # -- handlers ----------------------------------------------------------------------------------------------
    def _create_repo(self, payload: dict) -> None:
        name, org = payload.get("name"), payload.get("organization")
        if not name:
            raise HubError(400, "repo name is required")
        if payload.get("type") not in (None, "model"):
            raise HubError(400, f"test hub server: only model repos, got type {payload.get('type')!r}")
        repo_id = f"{org}/{name}" if org else name
        hub = self.server.hub
        url = f"{hub.url}/{repo_id}"
        if repo_id in hub.state.repos:
            return self._json(409, {"error": "You already created this model repo", "url": url})
        repo = Repo(repo_id=repo_id, private=payload.get("visibility") == "private" or bool(payload.get("private")))
        first = hub.state.new_commit(repo, None, "initial commit", {".gitattributes": b"*.safetensors filter=lfs\n"})
        repo.branches["main"] = first.oid
        hub.state.repos[repo_id] = repo
        self._json(200, {"url": url, "name": repo_id, "id": repo_id})

    def _validate_yaml(self, payload: dict) -> None:
        content = payload.get("content", "")
        errors = []
        if content.startswith("---"):
            lines = content.split("\n")
            if not any(line.strip() == "---" for line in lines[1:]):
                errors.append({"message": "metadata block opened with '---' is never closed"})
            elif "\t" in content.split("\n---", 2)[1]:
                errors.append({"message": "YAML metadata must not contain tabs"})
        if errors:
            return self._json(400, {"errors": errors, "warnings": []})
        self._json(200, {"errors": [], "warnings": []})

    def _model_info(self, repo: Repo, commit: Commit) -> None:
        self._json(
            200,
            {
                "id": repo.repo_id,
                "modelId": repo.repo_id,
                "sha": commit.oid,
                "private": repo.private,
                "lastModified": commit.date,
                "siblings": [{"rfilename": path} for path in sorted(commit.files)],
                "tags": [],
            },
        )

    def _tree(self, repo: Repo, commit: Commit, path: str, query: dict) -> None:
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        prefix = f"{path.rstrip('/')}/" if path else ""
        entries, folders = [], set()
        for name in sorted(commit.files):
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix) :]
            if "/" in rest:
                folder = prefix + rest.split("/")[0]
                if folder not in folders:
                    folders.add(folder)
                    entries.append({"type": "directory", "path": folder, "oid": git_blob_sha1(folder.encode())})
                if not recursive:
                    continue
            data = commit.files[name]
            entries.append({"type": "file", "path": name, "size": len(data), "oid": git_blob_sha1(data)})
        if path and not entries:
            raise HubError(404, f"{path} does not exist at {commit.oid}", "EntryNotFound", commit.oid)
        self._json(200, entries)

    def _preupload(self, commit: Commit, payload: dict, query: dict) -> None:
        if query.get("create_pr"):
            raise HubError(400, "test hub server: pull requests are not supported")
        files = []
        for item in payload.get("files", []):
            existing = commit.files.get(item["path"])
            files.append(
                {
                    "path": item["path"],
                    "uploadMode": "regular",  # never "lfs": no Xet/LFS transfer in tests
                    "shouldIgnore": False,
                    "oid": git_blob_sha1(existing) if existing is not None else None,
                }
            )
        self._json(200, {"files": files, "commitOid": commit.oid})

    def _commit(self, repo: Repo, revision: str, body: bytes, query: dict) -> None:
        if query.get("create_pr"):
            raise HubError(400, "test hub server: pull requests are not supported")
        state = self.server.hub.state
        if revision not in repo.branches:
            state.commit(repo, revision)  # 404 RevisionNotFound for unknown revisions
            raise HubError(400, f"Cannot commit to {revision!r}: not a branch")
        parent = state.commit(repo, revision)
        files = dict(parent.files)
        header = None
        for line in body.decode().splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            key, value = item["key"], item["value"]
            if key == "header":
                header = value
                expected = value.get("parentCommit")
                if expected and expected != parent.oid:
                    raise HubError(412, f"parentCommit {expected} is not the head of {revision} ({parent.oid})")
            elif key == "file":
                if value.get("encoding", "base64") != "base64":
                    raise HubError(400, f"unsupported encoding {value.get('encoding')!r}")
                files[value["path"]] = base64.b64decode(value["content"])
            elif key == "deletedFile":
                if value["path"] not in files:
                    raise HubError(404, "A file with this name doesn't exist", "EntryNotFound", parent.oid)
                del files[value["path"]]
            elif key == "deletedFolder":
                folder = value["path"].rstrip("/") + "/"
                files = {p: d for p, d in files.items() if not p.startswith(folder)}
            else:  # lfsFile: preupload never asks for LFS
                raise HubError(400, f"test hub server: unsupported commit operation {key!r}")
        if header is None:
            raise HubError(400, "commit payload has no header line")
        commit = state.new_commit(repo, parent.oid, header.get("summary", ""), files)
        repo.branches[revision] = commit.oid
        hub = self.server.hub
        self._json(
            200,
            {
                "success": True,
                "commitOid": commit.oid,
                "commitUrl": f"{hub.url}/{repo.repo_id}/commit/{commit.oid}",
                "hookOutput": "",
            },
        )

    def _create_branch(self, repo: Repo, branch: str, payload: dict) -> None:
        if branch in repo.branches:
            raise HubError(409, f"Reference refs/heads/{branch} already exists")
        if branch.startswith("refs/"):
            raise HubError(400, f"Invalid reference for a branch: {branch}")
        start = self.server.hub.state.commit(repo, payload.get("startingPoint") or "main")
        repo.branches[branch] = start.oid
        self._json(200, {})

    def _resolve(self, method: str, repo_id: str, revision: str, path_parts: list[str]) -> None:
        state = self.server.hub.state
        repo = state.repo(repo_id)
        commit = state.commit(repo, revision)
        path = "/".join(unquote(p) for p in path_parts)
        data = commit.files.get(path)
        if data is None:
            raise HubError(404, f"Entry not found: {path}", "EntryNotFound", commit.oid)
        headers = {
            "Content-Type": "application/octet-stream",
            "X-Repo-Commit": commit.oid,
            "ETag": f'"{git_blob_sha1(data)}"',
            "Accept-Ranges": "bytes",
        }
        status, payload = 200, data
        byte_range = self.headers.get("Range")
        if byte_range and byte_range.startswith("bytes=") and method == "GET":
            start_text, _, end_text = byte_range[len("bytes=") :].partition("-")
            start = int(start_text or 0)
            end = int(end_text) if end_text else len(data) - 1
            payload = data[start : end + 1]
            status = 206
            headers["Content-Range"] = f"bytes {start}-{start + len(payload) - 1}/{len(data)}"
        if method == "HEAD":
            self.send_response(status)
            for key, value in {**headers, "Content-Length": str(len(payload))}.items():
                self.send_header(key, value)
            self.end_headers()
            return
        self._send(status, payload, headers)


class HubServer:
    """A thread serving `HubRequestHandler` on 127.0.0.1 (port 0 by default). Use as a context manager."""

    class _Server(ThreadingHTTPServer):
        daemon_threads = True
        hub: "HubServer"
        requests: list[str]

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.state = HubState()
        self.errors: list[str] = []
        self._server = self._Server((host, port), HubRequestHandler)
        self._server.hub = self
        self._server.requests = []
        self.host, self.port = self._server.server_address[:2]
        self.url = f"http://{self.host}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="hub-server", daemon=True)

    @property
    def requests(self) -> list[str]:
        return self._server.requests

    def start(self) -> "HubServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> "HubServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- seeding and inspection helpers for tests ---------------------------------------------------------------
    def publish(self, repo_id: str, files: dict[str, bytes], repo_type: str = "model") -> str:
        """Creates (or updates) a repo holding `files` without going through the client; returns the commit oid.
        Dataset repos are readable with `hf_hub_download(..., repo_type="dataset")` (resolve only)."""
        key = f"datasets/{repo_id}" if repo_type == "dataset" else repo_id
        with self.state.lock:
            repo = self.state.repos.setdefault(key, Repo(repo_id=key, private=False))
            parent = repo.branches.get("main")
            previous = dict(repo.commits[parent].files) if parent else {}
            commit = self.state.new_commit(repo, parent, "seeded by the test", {**previous, **files})
            repo.branches["main"] = commit.oid
            return commit.oid

    def files(self, repo_id: str, revision: str = "main") -> dict[str, bytes]:
        with self.state.lock:
            repo = self.state.repo(repo_id)
            return dict(self.state.commit(repo, revision).files)

    def head(self, repo_id: str, revision: str = "main") -> str:
        with self.state.lock:
            return self.state.repos[repo_id].branches[revision]

    def history(self, repo_id: str, revision: str = "main") -> list[str]:
        """Commit titles from the newest back to the repo's creation."""
        with self.state.lock:
            repo = self.state.repos[repo_id]
            oid, titles = repo.branches[revision], []
            while oid is not None:
                titles.append(repo.commits[oid].title)
                oid = repo.commits[oid].parent
            return titles


RESULT_MARK = "@@SCENARIO_RESULT@@"  # a scenario run in a fresh interpreter prints its result after it


def hub_client_env(hub: HubServer, home: Path) -> dict:
    """The environment of a fresh interpreter whose Hub clients talk to `hub` (a dummy token, telemetry off, `home`
    as its HF_HOME)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    env.update(
        HF_ENDPOINT=hub.url,
        HF_TOKEN="hf_dummy_token_for_the_test_server",
        HF_HOME=str(home),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_XET="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HF_HUB_ETAG_TIMEOUT="5",
        HF_HUB_DOWNLOAD_TIMEOUT="5",
        TRANSFORMERS_VERBOSITY="error",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
        NO_PROXY="127.0.0.1,localhost",
    )
    return env


if __name__ == "__main__":  # a test Hub to point HF_ENDPOINT at by hand: python -m tests.testing_utils [port]
    with HubServer(port=int(sys.argv[1]) if len(sys.argv) > 1 else 0) as server:
        print(f"test hub at {server.url} (HF_ENDPOINT={server.url}); Ctrl-C to stop", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
