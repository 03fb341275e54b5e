"""`target.generate(**inputs, assistant_model=drafter)`: lossless greedy and sampling, validation, the seam."""

import os
import warnings

import pytest
import torch
import transformers.generation.utils
from transformers import GenerationMixin, LlamaForCausalLM, TextStreamer
from transformers.generation.candidate_generator import AssistedCandidateGenerator

from slimspec_hf import (
    SlimSpecDrafterForCausalLM,
    SlimSpecGenerationStats,
    decoding_slimspec,
    drafting_slimspec,
    install_generation_hook,
)
from slimspec_hf.generation_slimspec import GENERATE_PARAMETERS

from .testing_utils import (
    CHI2_999,
    HEAD_CONFIGS,
    LIVE_EOS,
    CountingDrafter,
    DraftWatch,
    assert_deep_drafts_accepted_and_rejected,
    chi_square,
    exact_marginals,
    make_char_tokenizer,
    make_counting_drafter,
    make_counting_target,
    make_drafter_for,
    make_live_target,
    make_oracle_drafter,
    make_tiny_drafter,
    make_tiny_target,
    tiny_target_config,
)


# -- greedy identity --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("head", list(HEAD_CONFIGS))
def test_greedy_identity_random_drafter(head):
    target = make_tiny_target(seed=11)
    drafter = make_drafter_for(target, head)
    generator = torch.Generator().manual_seed(0)
    for i in range(20):
        ids = torch.randint(0, 128, (1, 3 + i % 9), generator=generator)
        plain = target.generate(ids, max_new_tokens=10 + i, do_sample=False)
        fast = target.generate(ids, max_new_tokens=10 + i, do_sample=False, assistant_model=drafter)
        assert fast.tolist() == plain.tolist(), f"prompt {i}"
        assert drafter.last_generation_stats.rounds > 0


@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_identity_on_a_live_target_with_eos_and_length_boundary(k, monkeypatch):
    """Chains on a live target, with a drafter right at most positions: deep drafts accepted and rejected (the
    target's cache rolled back), EOS accepted inside a round (the round's later tokens dropped), rounds that end at
    the length limit; the drafter's state after every commit equals a fresh one's."""
    target = make_live_target(eos_token_id=LIVE_EOS)
    drafter = make_oracle_drafter(target)
    watch = DraftWatch(monkeypatch)
    generator = torch.Generator().manual_seed(k)
    saw_eos_inside, saw_exact_length, acceptance = False, False, []
    for i in range(10):
        ids = torch.randint(0, 128, (1, 2 + i % 5), generator=generator)
        max_new = 5 + (i * 7) % 23  # often not a multiple of k + 1: the last round hits the length boundary
        plain = target.generate(ids, max_new_tokens=max_new, do_sample=False)
        drafter.teach(plain[0].tolist())
        fast = target.generate(
            ids, max_new_tokens=max_new, do_sample=False, assistant_model=drafter, num_assistant_tokens=k
        )
        assert fast.tolist() == plain.tolist(), f"prompt {i}"
        stats = drafter.last_generation_stats
        assert len(stats.drafted_per_position) <= k
        acceptance.append(stats)
        new = plain[0, ids.shape[1] :].tolist()
        # every token kept is counted once, none after the EOS or the length limit: the prefill's, then each round's
        # accepted drafts and the target's own
        assert 1 + stats.rounds + stats.accepted_tokens == len(new), f"prompt {i}"
        saw_eos_inside |= LIVE_EOS in new[1:]  # not the prefill's token: one a round accepted
        saw_exact_length |= LIVE_EOS not in new and len(new) == max_new
        watch.check(target, drafter)
    assert saw_eos_inside and saw_exact_length and watch.checked > 10
    total = SlimSpecGenerationStats.combined(acceptance)
    assert_deep_drafts_accepted_and_rejected(total, depth=min(k, 3))


def test_acceptance_statistics_of_an_agreeing_drafter():
    target = make_counting_target()
    drafter = make_counting_drafter(target)
    drafter.wrong_every = 10_000  # never wrong
    ids = torch.tensor([[3, 4, 5]])
    out = target.generate(ids, max_new_tokens=29, do_sample=False, assistant_model=drafter, num_assistant_tokens=6)
    assert out[0, 3:].tolist() == [(6 + i) % 128 for i in range(29)]
    stats = drafter.last_generation_stats
    # 1 token from the prefill, then 4 rounds of 6 accepted + 1 bonus = 28 tokens
    assert (stats.rounds, stats.accepted_tokens) == (4, 24)
    assert stats.acceptance_length == pytest.approx(7.0)
    assert stats.per_position_acceptance == [1.0] * 6


def test_num_assistant_tokens_default_and_override():
    target = make_counting_target()
    drafter = make_counting_drafter(target)
    drafter.wrong_every = 10_000
    ids = torch.tensor([[1, 2]])
    target.generate(ids, max_new_tokens=40, do_sample=False, assistant_model=drafter)
    assert len(drafter.last_generation_stats.drafted_per_position) == 6  # config default
    target.generate(ids, max_new_tokens=40, do_sample=False, assistant_model=drafter, num_assistant_tokens=2)
    assert len(drafter.last_generation_stats.drafted_per_position) == 2


def test_one_drafter_serving_several_threads_gives_each_call_its_own_statistics():
    """A web server's pattern: 4 threads share one target and one drafter, 3 greedy calls each (every call its own
    prompt and length, so that no two calls' statistics agree). Every output equals the same call made alone, and
    every call's statistics are its own: the output's `slimspec_stats` (`return_dict_in_generate`), and the thread's
    `drafter.last_generation_stats` read once every thread has finished that call (a statistic shared by the threads
    would then hold the last call to finish). The process-wide switch verification sets is restored afterwards."""
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    target = make_live_target()
    drafter = make_drafter_for(target, "low_rank")
    generator = torch.Generator().manual_seed(0)
    calls = {
        (t, j): (torch.randint(0, 128, (1, 3 + t + 2 * j), generator=generator), 4 + 3 * t + j)
        for t in range(4)
        for j in range(3)
    }

    def run(t, j):
        ids, max_new = calls[t, j]
        out = target.generate(
            ids, max_new_tokens=max_new, do_sample=False, assistant_model=drafter, num_assistant_tokens=3,
            return_dict_in_generate=True,
        )  # fmt: skip
        return out.sequences.tolist(), out.slimspec_stats.as_dict()

    alone = {call: run(*call) for call in calls}
    assert len({str(stats) for _, stats in alone.values()}) == len(calls)  # every call's statistics tell it apart
    barrier = Barrier(4)

    def thread(t):
        seen = []
        for j in range(3):
            barrier.wait()  # the threads' calls run together ...
            sequences, stats = run(t, j)
            barrier.wait()  # ... and all have finished before any reads its statistics
            seen.append((sequences, stats, drafter.last_generation_stats.as_dict()))
        return seen

    switch = os.environ.get("TRANSFORMERS_SDPA_FORCE_GQA")  # set by every verification (`shared_kv_heads`)
    with ThreadPoolExecutor(4) as pool:
        threads = list(pool.map(thread, range(4)))
    assert os.environ.get("TRANSFORMERS_SDPA_FORCE_GQA") == switch  # restored once no thread verifies
    for t, seen in enumerate(threads):
        for j, (sequences, stats, last) in enumerate(seen):
            assert sequences == alone[t, j][0], (t, j)
            assert stats == alone[t, j][1] and last == alone[t, j][1], (t, j)


class HesitantCountingDrafter(CountingDrafter):
    """Always right (`token + 1`), but unsure (p ≈ 0.05) of the tokens that follow multiples of 5."""

    wrong_every = 10_000

    def forward(self, input_ids=None, **kwargs):
        out = super().forward(input_ids=input_ids, **kwargs)
        ids = input_ids[:, -out.logits.shape[1] :]
        unsure = (ids % 5 == 0)[..., None]
        out.logits = torch.where(unsure, out.logits / 10, out.logits)  # 20 -> 2: p = e^2 / (e^2 + 127)
        return out


def _drafted_per_round(drafter):
    stats = drafter.last_generation_stats
    return stats.drafted_tokens / stats.rounds


def test_confidence_threshold_stops_drafting_early_and_stays_lossless():
    from slimspec_hf import SlimSpecDrafterConfig

    target = make_counting_target()
    config = SlimSpecDrafterConfig.from_target_config(target.config, target_layer_ids=[1, 3, 5])
    drafter = HesitantCountingDrafter(config).eval().attach_target(target)
    ids = torch.tensor([[7, 8]])
    plain = target.generate(ids, max_new_tokens=60, do_sample=False)

    fixed = target.generate(ids, max_new_tokens=60, do_sample=False, assistant_model=drafter)
    assert fixed.tolist() == plain.tolist()
    fixed_rate = _drafted_per_round(drafter)
    assert fixed_rate > 5.5  # always k = 6 (but for the last, length-bounded round)

    early = target.generate(
        ids, max_new_tokens=60, do_sample=False, assistant_model=drafter, assistant_confidence_threshold=0.5
    )
    assert early.tolist() == plain.tolist()
    stats = drafter.last_generation_stats
    # every round ends at the first token after a multiple of 5: at most 5 drafted, all of them accepted
    assert len(stats.drafted_per_position) <= 5
    assert stats.accepted_tokens == stats.drafted_tokens
    assert _drafted_per_round(drafter) < fixed_rate - 1

    # the drafter's generation_config holds the default; an explicit generate() argument wins over it
    drafter.generation_config.assistant_confidence_threshold = 0.5
    target.generate(ids, max_new_tokens=60, do_sample=False, assistant_model=drafter)
    assert _drafted_per_round(drafter) < fixed_rate - 1
    target.generate(
        ids, max_new_tokens=60, do_sample=False, assistant_model=drafter, assistant_confidence_threshold=0.0
    )
    assert _drafted_per_round(drafter) == pytest.approx(fixed_rate)
    drafter.generation_config.assistant_confidence_threshold = 0.0

    # ... and so does a GenerationConfig holding it, passed to generate()
    from transformers import GenerationConfig

    config = GenerationConfig(max_new_tokens=60, do_sample=False, assistant_confidence_threshold=0.5)
    assert target.generate(ids, generation_config=config, assistant_model=drafter).tolist() == plain.tolist()
    assert _drafted_per_round(drafter) < fixed_rate - 1
    # the target's own generation_config is not the drafter's: as with transformers' assistants, it does not apply
    target.generation_config.assistant_confidence_threshold = 0.5
    target.generate(ids, max_new_tokens=60, do_sample=False, assistant_model=drafter)
    assert _drafted_per_round(drafter) == pytest.approx(fixed_rate)


def test_confidence_threshold_is_validated():

    target = make_counting_target()
    drafter = make_counting_drafter(target)
    with pytest.raises(ValueError, match="assistant_confidence_threshold"):
        target.generate(
            torch.tensor([[1, 2]]), max_new_tokens=5, assistant_model=drafter, assistant_confidence_threshold=-0.1
        )
    with pytest.raises(ValueError, match="assistant_confidence_threshold"):
        target.generate(
            torch.tensor([[1, 2]]), max_new_tokens=5, assistant_model=drafter, assistant_confidence_threshold=1.5
        )
    for k in (0, -2):  # used to mean "the config's k" and "draft nothing", silently
        with pytest.raises(ValueError, match="num_assistant_tokens"):
            target.generate(torch.tensor([[1, 2]]), max_new_tokens=5, assistant_model=drafter, num_assistant_tokens=k)


def test_text_generation_pipeline_takes_the_drafter():
    from transformers import pipeline

    target = make_tiny_target(seed=5, eos_token_id=1)
    drafter = make_drafter_for(target, "low_rank")
    pipe = pipeline("text-generation", model=target, tokenizer=make_char_tokenizer())
    plain = pipe("Hello there", max_new_tokens=16, do_sample=False)
    fast = pipe("Hello there", max_new_tokens=16, do_sample=False, assistant_model=drafter)
    assert fast[0]["generated_text"] == plain[0]["generated_text"]
    assert drafter.last_generation_stats.rounds > 0  # the SlimSpec generator drafted


def test_left_padding_attention_mask_streamer_and_dict_output(capsys):
    """A left-padded prompt on a live target, a drafter right at most positions: the dict output's scores, logits
    and hidden states (every layer, as the caller asked: not cut down to the drafter's three) equal plain greedy
    decoding's, step by step, also for tokens accepted deep in a round."""
    target = make_live_target(seed=5)
    drafter = make_oracle_drafter(target)
    ids = torch.tensor([[0, 0, 7, 8, 9, 10]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1]])
    outputs = dict(return_dict_in_generate=True, output_scores=True, output_logits=True, output_hidden_states=True)
    plain = target.generate(input_ids=ids, attention_mask=mask, max_new_tokens=15, do_sample=False, **outputs)
    drafter.teach(plain.sequences[0, 2:].tolist())
    fast = target.generate(
        input_ids=ids, attention_mask=mask, max_new_tokens=15, do_sample=False, assistant_model=drafter, **outputs
    )
    assert fast.sequences.tolist() == plain.sequences.tolist()
    assert drafter.last_generation_stats.accepted_tokens >= 6  # most tokens come from accepted drafts
    assert len(fast.scores) == len(fast.logits) == len(fast.hidden_states) == 15
    for step, (a, b) in enumerate(zip(fast.scores + fast.logits, plain.scores + plain.logits)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4, msg=f"step {step}")
    for step, (mine, theirs) in enumerate(zip(fast.hidden_states, plain.hidden_states)):
        assert len(mine) == len(theirs) == target.config.num_hidden_layers + 1, step
        for a, b in zip(mine, theirs):  # step 0 the prompt's (1, 6, d), then one (1, 1, d) per token
            assert a.shape == b.shape, step
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4, msg=f"step {step}")
    plain = plain.sequences

    class Tok:  # the smallest tokenizer a TextStreamer needs
        def decode(self, ids, **kwargs):
            return " ".join(str(int(i)) for i in ids) + " "

    streamer = TextStreamer(Tok())
    target.generate(input_ids=ids, attention_mask=mask, max_new_tokens=15, assistant_model=drafter, streamer=streamer)
    printed = capsys.readouterr().out.split()
    assert [int(t) for t in printed] == plain[0].tolist()


# -- sampling ---------------------------------------------------------------------------------------------------


def _sample_last_tokens(target, drafter, prompt, n, seed, max_new_tokens=3, num_assistant_tokens=2):
    torch.manual_seed(seed)
    counts = torch.zeros(3, target.config.vocab_size)
    for _ in range(n):
        out = target.generate(
            prompt,
            max_new_tokens=max_new_tokens,
            do_sample=True,
            top_k=0,
            assistant_model=drafter,
            num_assistant_tokens=num_assistant_tokens,
        )
        for j in range(3):
            counts[j, out[0, prompt.shape[1] + j]] += 1
    return counts


def test_speculative_sampling_matches_the_target_distribution():
    target = make_tiny_target(seed=21, vocab_size=12)
    with torch.no_grad():
        target.lm_head.weight.mul_(8)  # a peaked, non-uniform target distribution
    drafter = make_tiny_drafter(target, head_type="full", seed=4)
    with torch.no_grad():
        drafter.lm_head.weight.copy_(target.lm_head.weight + 0.5 * torch.randn_like(target.lm_head.weight))
    prompt = torch.tensor([[1, 5, 3]])
    exact = exact_marginals(target, prompt, 3)
    counts = _sample_last_tokens(target, drafter, prompt, 1500, seed=0)
    assert drafter.last_generation_stats.drafted_tokens > 0
    for j in (1, 2):  # tokens 2 and 3 come through the speculative acceptance rule
        stat, dof = chi_square(counts[j], exact[j])
        assert stat < CHI2_999[dof - 1], (j, stat, dof)

    # The same test fails for a rule that tests the drafted tokens against another q than they were drawn from.
    expand = drafting_slimspec.TreeDrafter.expand

    def flattened_q(self, tree, frontier, logits):
        children = expand(self, tree, frontier, logits)
        for proposals in tree.proposals.values():
            for proposal in proposals:
                proposal.q = torch.softmax(proposal.q.log() * 0.2, dim=-1)
        return children

    drafting_slimspec.TreeDrafter.expand = flattened_q
    try:
        counts = _sample_last_tokens(target, drafter, prompt, 1500, seed=0)
    finally:
        drafting_slimspec.TreeDrafter.expand = expand
    stat, dof = chi_square(counts[1], exact[1])
    assert stat > CHI2_999[dof - 1], stat


def test_sampling_with_processors_stays_lossless_in_greedy_mode():
    # repetition penalty changes the argmax; the drafter sees the same processors
    target = make_tiny_target(seed=8)
    drafter = make_drafter_for(target, "full")
    ids = torch.tensor([[5, 6, 7, 5, 6]])
    plain = target.generate(ids, max_new_tokens=20, do_sample=False, repetition_penalty=1.3)
    fast = target.generate(ids, max_new_tokens=20, do_sample=False, repetition_penalty=1.3, assistant_model=drafter)
    assert fast.tolist() == plain.tolist()


# -- validation and the hook ------------------------------------------------------------------------------------


def test_mismatched_drafters_fail_loudly():
    target = make_tiny_target()
    ids = torch.tensor([[1, 2, 3]])
    other_vocab = make_tiny_drafter(make_tiny_target(vocab_size=100))
    with pytest.raises(ValueError, match="vocab_size \\(100\\)"):
        target.generate(ids, max_new_tokens=4, assistant_model=other_vocab)
    other_width = make_tiny_drafter(make_tiny_target(hidden_size=48, num_attention_heads=4))
    with pytest.raises(ValueError, match="target_hidden_size 48"):
        target.generate(ids, max_new_tokens=4, assistant_model=other_width)
    too_deep = make_tiny_drafter(target, target_layer_ids=[1, 3, 50], target_num_hidden_layers=None)
    with pytest.raises(ValueError, match="\\[50\\]"):
        target.generate(ids, max_new_tokens=4, assistant_model=too_deep)


def test_target_of_another_depth_warns():
    target = make_tiny_target()
    drafter = make_tiny_drafter(target, target_model_name_or_path="HuggingFaceTB/SmolLM2-135M-Instruct")
    deeper = make_tiny_target(num_hidden_layers=8)
    with pytest.warns(UserWarning, match="trained for"):
        deeper.generate(torch.tensor([[1, 2]]), max_new_tokens=3, assistant_model=drafter)


def test_hook_is_installed_once_and_defers_for_other_assistants(monkeypatch):
    make_tiny_drafter(make_tiny_target())  # building a drafter installs the wrapper
    hook = GenerationMixin.generate
    install_generation_hook()
    install_generation_hook()
    assert GenerationMixin.generate is hook and hook._slimspec_dispatch
    assert not getattr(hook.__wrapped__, "_slimspec_dispatch", False)  # wrapped once, not twice

    built = []

    class Recording(AssistedCandidateGenerator):
        def __init__(self, *args, **kwargs):
            built.append(type(self))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(transformers.generation.utils, "AssistedCandidateGenerator", Recording)
    target = make_tiny_target()
    assistant = LlamaForCausalLM(tiny_target_config(num_hidden_layers=1)).eval()
    ids = torch.tensor([[1, 2, 3]])
    plain = target.generate(ids, max_new_tokens=8, do_sample=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assisted = target.generate(ids, max_new_tokens=8, do_sample=False, assistant_model=assistant)
    assert assisted.tolist() == plain.tolist()
    assert built == [Recording]  # transformers' own generator for a plain assistant
    drafter = make_tiny_drafter(target)
    target.generate(ids, max_new_tokens=8, do_sample=False, assistant_model=drafter)
    assert built == [Recording] and drafter.last_generation_stats.rounds > 0  # ours for a SlimSpec drafter


def test_the_seam_binds_what_it_relies_on_by_name():
    """The wrapper reads `generate()`'s parameters by name and hands the loop over as a `custom_generate` callable:
    a transformers release that renames them, or that forwards its own keys under the loop's names, fails here."""
    import inspect

    make_tiny_drafter(make_tiny_target())
    parameters = inspect.signature(GenerationMixin.generate.__wrapped__).parameters
    assert set(GENERATE_PARAMETERS) <= set(parameters)
    assert parameters["kwargs"].kind is inspect.Parameter.VAR_KEYWORD
    # generate() passes a callable the keys its own loops lack (`_sample` is the reference it compares with)
    usual = set(inspect.signature(GenerationMixin._sample).parameters)
    ours = set(inspect.signature(decoding_slimspec.slimspec_generate).parameters)
    assert {"drafter", "draft_settings", "draft_streamer"} <= ours - usual
    assert {"input_ids", "logits_processor", "stopping_criteria", "generation_config"} <= usual & ours
    assert "streamer" in usual and "assistant_model" not in usual  # why the drafter and streamer are renamed


def test_a_drafter_loaded_as_remote_code_decodes_with_its_own_decoding_module(tmp_path, monkeypatch):
    """The wrapper sends a drafter to `generate_with_drafter` of the `decoding_slimspec` beside its class's module:
    the copy `save_pretrained` shipped with it (reached only through the wrapper's relative import; the modeling file
    imports no decoding loop), never the package's; a class with no such sibling falls back to the package's."""
    import importlib
    from pathlib import Path

    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    from slimspec_hf.generation_slimspec import decoding_route

    modeling = Path(decoding_slimspec.__file__).with_name("modeling_slimspec.py").read_text()
    assert "import generate_with_drafter" not in modeling and "from .decoding_slimspec" not in modeling
    target = make_tiny_target()
    make_tiny_drafter(target).save_pretrained(tmp_path / "drafter")
    assert (tmp_path / "drafter" / "decoding_slimspec.py").is_file()
    # the folder's own code, as a Hub user without this package gets it (here the package's Auto class would win)
    remote = get_class_from_dynamic_module("modeling_slimspec.SlimSpecDrafterForCausalLM", str(tmp_path / "drafter"))
    drafter = remote.from_pretrained(tmp_path / "drafter").eval()
    package = type(drafter).__module__.rpartition(".")[0]
    assert package.startswith("transformers_modules"), package
    own = importlib.import_module(f"{package}.decoding_slimspec")
    routed, entry = [], own.generate_with_drafter
    monkeypatch.setattr(own, "generate_with_drafter", lambda *args: routed.append(args[2]) or entry(*args))
    monkeypatch.setattr(decoding_slimspec, "generate_with_drafter", lambda *args: pytest.fail("the package's copy"))
    ids = torch.tensor([[1, 2, 3]])
    out = target.generate(ids, max_new_tokens=8, do_sample=False, assistant_model=drafter, num_assistant_tokens=2)
    assert out.tolist() == target.generate(ids, max_new_tokens=8, do_sample=False).tolist()
    assert routed == [drafter] and drafter.last_generation_stats.rounds > 0
    monkeypatch.undo()

    class ElsewhereDrafter:  # a class whose module has no `decoding_slimspec` beside it
        pass

    assert decoding_route(ElsewhereDrafter()) is decoding_slimspec.generate_with_drafter


def test_importing_patches_nothing_and_loading_a_drafter_installs_the_wrapper(tmp_path):
    script = f"""
import slimspec_hf
from transformers import AutoModelForCausalLM, GenerationMixin
assert not getattr(GenerationMixin.generate, "_slimspec_dispatch", False), "patched on import"
AutoModelForCausalLM.from_pretrained({str(tmp_path)!r})
assert GenerationMixin.generate._slimspec_dispatch
print("ok")
"""
    import subprocess
    import sys

    make_tiny_drafter(make_tiny_target()).save_pretrained(tmp_path)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.stdout.strip() == "ok", result.stderr[-2000:]


@pytest.mark.integration
def test_greedy_identity_on_smollm2(embedded_target):
    from slimspec_hf import SlimSpecDrafterConfig

    model, tokenizer = embedded_target
    config = SlimSpecDrafterConfig.from_target_config(model.config)
    torch.manual_seed(0)
    drafter = SlimSpecDrafterForCausalLM(config).eval()
    drafter.lm_head.init_from_dense(model.lm_head.weight)
    for question in ["What is 2 + 2?", "Name three colours.", "Write a haiku about the sea."]:
        messages = [{"role": "user", "content": question}]
        inputs = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        plain = model.generate(**inputs, max_new_tokens=40, do_sample=False)
        fast = model.generate(**inputs, max_new_tokens=40, do_sample=False, assistant_model=drafter)
        assert fast.tolist() == plain.tolist()
        hybrid = model.generate(
            **inputs, max_new_tokens=40, do_sample=False, assistant_model=drafter, draft_lookup=True,
            draft_lookup_min_ngram=2,
        )  # fmt: skip
        assert hybrid.tolist() == plain.tolist()


# -- hybrid drafting: prompt lookup + drafter ---------------------------------------------------------------------


def test_lookup_continuation_takes_the_longest_most_recent_match():
    from slimspec_hf.drafting_slimspec import lookup_continuation

    def run(tokens, max_ngram, num_tokens):
        found = lookup_continuation(torch.tensor(tokens), max_ngram, num_tokens)
        return None if found is None else (found.tokens, found.ngram)

    # "2 3" occurs at 2 and 7 ("0 2 3" nowhere earlier): the most recent earlier one, followed by 7 8 0 ...
    assert run([5, 1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 0, 2, 3], 4, 3) == ([7, 8, 0], 2)
    # "2 3 4" at 1 and 5 -> the most recent (5) continues with 5; "5 2 3 4" is not earlier
    assert run([1, 2, 3, 4, 1, 2, 3, 4, 5, 2, 3, 4], 4, 2) == ([5, 2], 3)
    assert run([1, 2, 3, 4, 1, 2, 3, 4, 5, 2, 3, 4], 2, 2) == ([5, 2], 2)  # capped at max_ngram
    assert run([1, 2], 3, 4) is None  # nothing earlier than the last token
    assert run([4, 4, 4], 3, 4) == ([4], 2)


def test_hybrid_greedy_on_a_live_target_accepts_and_rejects_deep_drafts(monkeypatch):
    """Prompt lookup beside a chain drafter on a live target: lookup rounds (verified alone), short matches grafted
    onto the drafter's draft and the drafter's chains extended by lookup, deep drafts accepted and rejected. Output
    plain greedy; the drafter's state after every commit a fresh one's (lookup rounds leave features pending)."""
    target = make_live_target(seed=3)
    drafter = make_oracle_drafter(target)
    watch = DraftWatch(monkeypatch)
    rounds, sources = [], set()
    for seed in range(4):
        ids = torch.randint(0, 128, (1, 5), generator=torch.Generator().manual_seed(seed))
        ids = torch.cat([ids, ids, ids[:, :2]], dim=-1)  # repeated text: lookup rounds happen
        plain = target.generate(ids, max_new_tokens=30, do_sample=False)
        drafter.teach(plain[0].tolist())
        fast = target.generate(
            ids, max_new_tokens=30, do_sample=False, assistant_model=drafter, num_assistant_tokens=3,
            draft_lookup=True, draft_lookup_min_ngram=2, draft_lookup_extend_ngram=1,
        )  # fmt: skip
        assert fast.tolist() == plain.tolist(), seed
        rounds.append(drafter.last_generation_stats)
        sources |= set(drafter.last_generation_stats.rounds_by_source)
        watch.check(target, drafter)
    assert {"lookup", "drafter", "drafter+lookup"} <= sources, sources
    assert_deep_drafts_accepted_and_rejected(SlimSpecGenerationStats.combined(rounds), depth=3)


@pytest.mark.parametrize("head", ["low_rank", "full", "trimmed"])
def test_hybrid_greedy_output_is_identical_and_splits_the_stats(head):
    target = make_tiny_target(seed=5)
    drafter = make_drafter_for(target, head)
    sources = set()
    for seed in range(6):
        torch.manual_seed(seed)
        ids = torch.randint(0, target.config.vocab_size, (1, 4))
        ids = torch.cat([ids, ids, ids[:, :2]], dim=-1)  # repeated text: lookup rounds happen
        plain = target.generate(ids, max_new_tokens=30, do_sample=False)
        hybrid = target.generate(
            ids, max_new_tokens=30, do_sample=False, assistant_model=drafter, draft_lookup=True,
            draft_lookup_min_ngram=2, num_assistant_tokens=3,
        )  # fmt: skip
        assert hybrid.tolist() == plain.tolist(), seed
        stats = drafter.last_generation_stats
        assert sum(stats.rounds_by_source.values()) == stats.rounds
        assert sum(stats.accepted_by_source.values()) == stats.accepted_tokens
        sources |= set(stats.rounds_by_source)
    assert {"lookup", "drafter"} <= sources <= {"lookup", "drafter", "drafter+lookup"}


def test_hybrid_feeds_the_drafter_every_accepted_position_once():
    """Lookup rounds skip the drafter; the target features they accept still reach its cache, in order."""
    target = make_counting_target()
    drafter = make_counting_drafter(target)
    seen = []
    original = SlimSpecDrafterForCausalLM.forward

    def spy(self, input_ids=None, target_features=None, position_ids=None, **kwargs):
        if target_features is not None:
            seen.extend(position_ids[0].tolist())
        return original(
            self, input_ids=input_ids, target_features=target_features, position_ids=position_ids, **kwargs
        )

    drafter.forward = spy.__get__(drafter)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1, 2, 3]])  # counting up: lookup finds "4 5 6 ..."
    out = target.generate(ids, max_new_tokens=40, do_sample=False, assistant_model=drafter, draft_lookup=True)
    stats = drafter.last_generation_stats
    assert stats.rounds_by_source.get("lookup", 0) > 0 and stats.rounds_by_source.get("drafter", 0) > 0
    assert seen == list(range(len(seen)))  # contiguous, none skipped, none twice
    assert len(seen) <= out.shape[1] - 1


def test_draft_settings_come_from_the_generation_config_and_are_validated():
    target = make_counting_target()
    drafter = make_counting_drafter(target)
    ids = torch.tensor([[1, 2, 3, 4, 1, 2, 3]])
    drafter.generation_config.draft_lookup = True
    drafter.generation_config.draft_lookup_min_ngram = 2
    target.generate(ids, max_new_tokens=20, do_sample=False, assistant_model=drafter)
    assert drafter.last_generation_stats.rounds_by_source.get("lookup", 0) > 0
    target.generate(ids, max_new_tokens=20, do_sample=False, assistant_model=drafter, draft_lookup=False)
    assert "lookup" not in drafter.last_generation_stats.rounds_by_source
    with pytest.raises(ValueError, match="draft_lookup_max_ngram"):
        target.generate(ids, max_new_tokens=5, assistant_model=drafter, draft_lookup_max_ngram=1)
    with pytest.raises(ValueError, match="draft_lookup"):  # a SlimSpec setting without a SlimSpec drafter
        target.generate(ids, max_new_tokens=5, draft_lookup=True)


def test_generation_config_round_trips_with_the_checkpoint(tmp_path):
    target = make_tiny_target(seed=5)
    drafter = make_tiny_drafter(target)
    drafter.generation_config.num_assistant_tokens = 3
    drafter.generation_config.draft_lookup = True
    drafter.save_pretrained(tmp_path)
    loaded = SlimSpecDrafterForCausalLM.from_pretrained(tmp_path)
    assert loaded.generation_config.num_assistant_tokens == 3 and loaded.generation_config.draft_lookup is True
    (tmp_path / "generation_config.json").unlink()  # a folder without one: the defaults
    loaded = SlimSpecDrafterForCausalLM.from_pretrained(tmp_path)
    assert loaded.generation_config.num_assistant_tokens == 6  # the default k (DraftSettings)


@pytest.mark.parametrize(
    "settings",
    [
        {"draft_lookup_min_ngram": 1},  # lookup rounds (verified by matching)
        {"draft_lookup_min_ngram": 8, "draft_lookup_extend_ngram": 1},  # drafter chains extended by lookup
        # every match a branch of its own beside the drafter's tree, agreeing or not
        {"draft_lookup_min_ngram": 8, "draft_lookup_branch_ngram": 1, "draft_tree_size": 2, "draft_tree_depth": 1},
    ],
    ids=["lookup-rounds", "extended-chains", "branches"],
)
def test_hybrid_sampling_matches_the_target_distribution(settings):
    target = make_tiny_target(seed=21, vocab_size=12)
    with torch.no_grad():
        target.lm_head.weight.mul_(8)
    drafter = make_tiny_drafter(target, head_type="full", seed=4)
    drafter.generation_config.draft_lookup = True
    for name, value in settings.items():
        setattr(drafter.generation_config, name, value)
    prompt = torch.tensor([[1, 5, 3, 1, 5]])
    sample = dict(max_new_tokens=6, num_assistant_tokens=1)
    exact = exact_marginals(target, prompt, 3)
    counts = _sample_last_tokens(target, drafter, prompt, 1500, seed=0, **sample)
    assert len(drafter.last_generation_stats.rounds_by_source) > 0
    for j in (1, 2):
        stat, dof = chi_square(counts[j], exact[j])
        assert stat < CHI2_999[dof - 1], (j, stat, dof)

    # Claiming a lookup draft came from a uniform distribution (it is deterministic) breaks the acceptance rule.
    graft = drafting_slimspec.DraftTree.graft
    sources = set()

    def uniform(self, tokens, below=drafting_slimspec.ROOT):
        graft(self, tokens, below)
        sources.add(self.source)
        for proposals in self.proposals.values():
            for proposal in proposals:
                if proposal.q is None:
                    proposal.q = torch.full((target.config.vocab_size,), 1.0 / target.config.vocab_size)

    drafting_slimspec.DraftTree.graft = uniform
    try:
        counts = _sample_last_tokens(target, drafter, prompt, 1500, seed=0, **sample)
    finally:
        drafting_slimspec.DraftTree.graft = graft
    assert sources & {"lookup", "drafter"}, sources
    stats = [chi_square(counts[j], exact[j]) for j in (1, 2)]
    assert any(stat > CHI2_999[dof - 1] for stat, dof in stats), stats


@pytest.mark.parametrize("head", ["low_rank", "full"])
def test_tree_settings_route_generate_to_tree_decoding(head):
    """`draft_tree_size` > 0 (a generate() keyword or the drafter's generation_config) drafts a tree; 0 a chain."""
    target = make_tiny_target(seed=5)
    drafter = make_drafter_for(target, head)
    ids = torch.tensor([[3, 9, 27, 81, 3, 9]])
    plain = target.generate(ids, max_new_tokens=24, do_sample=False)
    tree = target.generate(
        ids, max_new_tokens=24, do_sample=False, assistant_model=drafter, draft_tree_size=8, draft_tree_depth=3
    )
    assert tree.tolist() == plain.tolist()
    tree_stats = drafter.last_generation_stats
    assert tree_stats.drafted_tokens / tree_stats.rounds > 3  # up to 8 nodes a round, not a chain of k
    drafter.generation_config.draft_tree_size = 8
    assert target.generate(ids, max_new_tokens=24, do_sample=False, assistant_model=drafter).tolist() == plain.tolist()
    assert drafter.last_generation_stats.drafted_tokens == tree_stats.drafted_tokens
    chain = target.generate(
        ids, max_new_tokens=24, do_sample=False, assistant_model=drafter, draft_tree_size=0, num_assistant_tokens=2
    )
    assert chain.tolist() == plain.tolist()
    assert drafter.last_generation_stats.drafted_tokens / drafter.last_generation_stats.rounds <= 2


def test_same_target_under_another_name_does_not_warn_and_a_warning_points_at_the_caller():
    """The same target loaded from a local folder (its `_name_or_path` a cache path) is the same target (#21)."""
    import warnings

    target = make_tiny_target()
    drafter = make_tiny_drafter(target, target_model_name_or_path="HuggingFaceTB/SmolLM2-135M-Instruct")
    target.config._name_or_path = "/root/.cache/slimspec_hf/smollm2-135m-instruct-fp32"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        target.generate(torch.tensor([[1, 2]]), max_new_tokens=3, assistant_model=drafter)
    deeper = make_tiny_target(num_hidden_layers=8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        deeper.generate(torch.tensor([[1, 2]]), max_new_tokens=3, assistant_model=drafter)
    (warning,) = [w for w in caught if "trained for" in str(w.message)]
    assert warning.filename == __file__, warning.filename
    assert "6 layers" in str(warning.message) and "8 layers" in str(warning.message)


def test_stop_strings_end_a_drafted_answer_where_they_end_the_targets_own(embedded_target):
    """`stop_strings` with `tokenizer=` (what a base model's prompts need, the Gemma card's quick start): transformers
    drops `tokenizer` on a custom_generate route, so the drafter's route builds the criterion; output as plain."""
    from slimspec_hf import SlimSpecDrafterConfig, SlimSpecDrafterForCausalLM

    model, tokenizer = embedded_target
    torch.manual_seed(0)  # any drafter: the output is the target's
    drafter = SlimSpecDrafterForCausalLM(SlimSpecDrafterConfig.from_target_config(model.config)).eval()
    drafter.attach_target(model)
    inputs = tokenizer.apply_chat_template(
        [{"role": "user", "content": "List three colours, one per line."}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    kwargs = dict(max_new_tokens=40, do_sample=False, stop_strings=["Blue"], tokenizer=tokenizer)
    plain = model.generate(**inputs, **kwargs)
    assert tokenizer.decode(plain[0, inputs["input_ids"].shape[1] :]).endswith("Blue")  # stopped there
    for shape in ("auto", "fixed"):
        assert (
            model.generate(**inputs, assistant_model=drafter, draft_shape=shape, **kwargs).tolist() == plain.tolist()
        )
