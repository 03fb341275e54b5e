"""`slimspec convert --recover`: the converted head fitted to the source's dense head on the drafter's own states.

A tiny dense-head drafter is the source; its conversion at rank 4 (SVD) is recovered on states of random sequences
read by a tiny target (the fit, the states and the resume, in process), and the real SmolLM2 runs the whole command
once with a dense-head drafter built from the shipped backbone and the target's own LM head.
"""

import copy
import json

import pytest
import torch

from slimspec_hf import cli
from slimspec_hf.interop.convert import convert_eagle3, full_vocab_head, read_eagle3_checkpoint
from slimspec_hf.interop.export import export_speculators
from slimspec_hf.interop.recover import RecoverSettings, collect_head_states, fit_low_rank_head, target_answers

from ..testing_utils import make_char_tokenizer, make_tiny_drafter, make_tiny_target


PROMPTS = ["Hi", "What is the capital of France?", "Tell me a story about a dog", "ok?"]


def _chat_tokenizer():
    """The character tokenizer of the tiny targets with a chat template (recovery answers chat prompts)."""
    tokenizer = make_char_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}<{{ m['content'] }}>{% endfor %}"
    return tokenizer


@pytest.fixture
def converted(tmp_path):
    """(target, source dense drafter, its rank-4 conversion, the source's dense head, random sequences)."""
    target = make_tiny_target(num_hidden_layers=8, seed=2)
    source = make_tiny_drafter(target, head_type="full", target_layer_ids=[1, 3, 6], norm_output=True)
    with torch.no_grad():
        for parameter in source.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0, 0.4)
    folder = export_speculators(source, tmp_path / "source")
    ckpt = read_eagle3_checkpoint(folder)
    drafter = convert_eagle3(ckpt, target, rank=4)
    dense = full_vocab_head(ckpt, target, drafter.config.hidden_size)
    g = torch.Generator().manual_seed(0)
    sequences = [torch.randint(0, target.config.vocab_size, (n,), generator=g) for n in (20, 31, 12, 25, 40, 18)]
    return target, source, drafter, dense, sequences


def test_head_states_are_the_drafters_own_at_every_drafting_step(converted):
    target, source, drafter, _, sequences = converted
    states = collect_head_states(drafter, target, sequences[:1], ttt_steps=3)
    T = sequences[0].numel() - 1
    assert states.shape == (T + (T - 1) + (T - 2), drafter.config.hidden_size)
    ids = sequences[0][None]
    from slimspec_hf import SlimSpecDrafterCache

    with torch.no_grad():  # as decoding drafts: the cached forward over 0..t, then step 1 fed its own state at t
        features = torch.cat([target(ids[:, :T], output_hidden_states=True).hidden_states[i] for i in (1, 3, 6)], -1)
        out = drafter(input_ids=ids[:, 1 : T + 1], target_features=features)
        torch.testing.assert_close(states[:T], drafter.head_states(out.hidden_states)[0], atol=1e-5, rtol=1e-5)
        for t in (0, 5, T - 2):
            cache = SlimSpecDrafterCache()
            first = drafter(
                input_ids=ids[:, 1 : t + 2], target_features=features[:, : t + 1], cache=cache, use_cache=True
            )
            second = drafter(
                input_ids=ids[:, t + 2 : t + 3],
                hidden_states=first.hidden_states[:, -1:],
                position_ids=torch.tensor([[t + 1]]),
                cache=cache,
                use_cache=True,
            )
            torch.testing.assert_close(
                states[T + t], drafter.head_states(second.hidden_states)[0, 0], atol=1e-4, rtol=1e-4
            )


def test_the_fit_beats_both_svds_and_resumes_where_it_stopped(converted, tmp_path):
    target, _, drafter, dense, sequences = converted
    states = collect_head_states(drafter, target, sequences, ttt_steps=3)
    work = tmp_path / "work"
    settings = RecoverSettings(seconds=4.0, batch_size=64, learning_rate=5e-3, dtype=torch.float32)
    record = fit_low_rank_head(drafter.lm_head, dense, states, settings, work)
    assert record["steps"] > 10
    assert record["recovered"]["kl"] < record["activation_svd"]["kl"] < record["svd"]["kl"]
    assert record["recovered"]["top1_agreement"] > record["svd"]["top1_agreement"]
    fitted = drafter.lm_head.merged_weight().clone()
    again = fit_low_rank_head(
        drafter.lm_head, dense, states, RecoverSettings(seconds=2.0, batch_size=64, dtype=torch.float32), work
    )
    assert again["steps"] > record["steps"] and again["seconds"] > record["seconds"]  # the same run, continued
    assert again["svd"] == record["svd"]  # the starts are not recomputed
    assert again["recovered"]["kl"] <= record["recovered"]["kl"] * 1.05
    assert not torch.equal(fitted, drafter.lm_head.merged_weight())
    assert json.loads((work / "fit.json").read_text())["steps"] == again["steps"]


def test_a_resumed_fit_equals_one_that_never_stopped(converted, tmp_path):
    """A fit stopped after 12 steps and resumed to 30 takes the same steps as one that ran 30 at once: the factors,
    Adam's moments and the batches continue where they stopped (restarted moments would change every later step)."""
    target, _, drafter, dense, sequences = converted
    states = collect_head_states(drafter, target, sequences[:3], ttt_steps=2)

    def settings(steps):
        return RecoverSettings(seconds=600.0, max_steps=steps, batch_size=32, learning_rate=1e-2, dtype=torch.float32)

    whole, parts = copy.deepcopy(drafter.lm_head), copy.deepcopy(drafter.lm_head)
    assert fit_low_rank_head(whole, dense, states, settings(30), tmp_path / "whole")["steps"] == 30
    assert fit_low_rank_head(parts, dense, states, settings(12), tmp_path / "parts")["steps"] == 12
    stopped = parts.merged_weight().detach().clone()
    assert fit_low_rank_head(parts, dense, states, settings(30), tmp_path / "parts")["steps"] == 30
    assert not torch.equal(stopped, parts.merged_weight())  # the resumed call took its 18 steps
    torch.testing.assert_close(parts.down.weight, whole.down.weight, atol=1e-6, rtol=0)
    torch.testing.assert_close(parts.up.weight, whole.up.weight, atol=1e-6, rtol=0)


def test_target_answers_in_a_batch_equal_each_prompt_answered_alone():
    """Recovery's target answers, generated in a batch of prompts of different lengths where one answer ends early,
    each equal the prompt's answer generated alone (a right-padded batch, or the padding the batch adds after an
    answer's end-of-sequence token, would change them)."""
    target, tokenizer, new = make_tiny_target(seed=2), _chat_tokenizer(), 12
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
        for p in PROMPTS
    ]
    prompt_lengths = [len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in texts]
    assert len(set(prompt_lengths)) == len(PROMPTS)  # every row of the batch but the longest is padded
    first = target_answers(target, tokenizer, PROMPTS[:1], new)[0]
    target.generation_config.eos_token_id = int(first[prompt_lengths[0] + 2])  # ends the first answer early
    alone = [target_answers(target, tokenizer, [p], new)[0] for p in PROMPTS]
    answer_lengths = [len(a) - n for a, n in zip(alone, prompt_lengths)]
    assert min(answer_lengths) < new == max(answer_lengths)  # the batch pads a finished row while another goes on
    batched = target_answers(target, tokenizer, PROMPTS, new, batch_size=len(PROMPTS))
    for prompt, one, together in zip(PROMPTS, alone, batched):
        assert torch.equal(together, one), f"{prompt!r}: batched {together.tolist()} != alone {one.tolist()}"


def test_convert_recover_fits_the_source_head_not_the_targets(converted, tmp_path):
    """`slimspec convert --recover` with a source whose dense head disagrees with the target's LM head: on the
    drafter's own states, the recovered head's top-1 tokens agree with the source head's at least 0.25 more often
    than with the target head's (a fit to the target's head reverses that)."""
    target, source, _, dense, _ = converted
    folder = export_speculators(source, tmp_path / "cli-source")
    target.save_pretrained(tmp_path / "target")
    _chat_tokenizer().save_pretrained(tmp_path / "target")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"turns": [p]}) + "\n" for p in PROMPTS))
    out = tmp_path / "slim"
    argv = ["convert", "--from", "eagle3", str(folder), "--target", str(tmp_path / "target"), "--out", str(out)]
    argv += ["--rank", "8", "--recover", "--prompts", str(prompts), "--recover-seconds", "1"]
    assert cli.main(argv) == 0
    from safetensors.torch import load_file

    from slimspec_hf import SlimSpecDrafterForCausalLM

    states = load_file(str(tmp_path / "slim.recover" / "states.safetensors"))["states"]  # the head's inputs
    recovered = SlimSpecDrafterForCausalLM.from_pretrained(out, dtype=torch.float32).lm_head.merged_weight().detach()
    target_head = target.get_output_embeddings().weight.detach().float()

    def agreement(a, b):
        return float(((states @ a.T).argmax(-1) == (states @ b.T).argmax(-1)).float().mean())

    assert agreement(dense, target_head) < 0.1  # two teachers that disagree: the test tells which one was fitted
    assert agreement(recovered, dense) >= agreement(recovered, target_head) + 0.25, (
        f"top-1 agreement of the recovered head with the source head {agreement(recovered, dense):.3f}, with the "
        f"target's {agreement(recovered, target_head):.3f}"
    )


@pytest.mark.integration
def test_convert_recover_on_the_real_smollm2(tmp_path, capsys):
    """The whole command on SmolLM2: a dense-head source (the shipped backbone, the target's LM head as its head)
    converted at r = 72 with a few seconds of recovery; the fit is reported and resumes; bad options fail."""
    from slimspec_hf import SlimSpecDrafterConfig, SlimSpecDrafterForCausalLM
    from slimspec_hf.targets import EMBEDDED_DRAFTER_DIR, load_target

    target, _ = load_target("embedded", dtype=torch.float32, tokenizer_required=False)
    shipped = SlimSpecDrafterForCausalLM.from_pretrained(EMBEDDED_DRAFTER_DIR, dtype=torch.float32)
    config = SlimSpecDrafterConfig(**{**shipped.config.to_dict(), "head_type": "full", "head_rank": None})
    dense = SlimSpecDrafterForCausalLM(config).float()
    dense.load_state_dict(
        {k: v for k, v in shipped.state_dict().items() if not k.startswith("lm_head.")}, strict=False
    )
    with torch.no_grad():
        dense.lm_head.weight.copy_(target.get_output_embeddings().weight)
    source = export_speculators(dense, tmp_path / "source")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"turns": [f"Tell me about the number {i}."]}) + "\n" for i in range(3)))
    out = tmp_path / "slim"
    base = ["convert", "--from", "eagle3", str(source), "--target", "embedded", "--out", str(out)]
    argv = base + ["--recover", "--prompts", str(prompts), "--recover-seconds", "8"]
    assert cli.main(argv) == 0
    report = capsys.readouterr().out
    assert "recovered:" in report and "agreement with the source head" in report
    record = json.loads((tmp_path / "slim.recover" / "fit.json").read_text())
    assert record["recovered"]["top1_agreement"] > record["svd"]["top1_agreement"]
    assert SlimSpecDrafterForCausalLM.from_pretrained(out).config.head_rank == 72
    assert cli.main(argv[:-1] + ["4"]) == 0  # a second call continues the same fit
    assert json.loads((tmp_path / "slim.recover" / "fit.json").read_text())["steps"] > record["steps"]
    capsys.readouterr()
    assert cli.main(base + ["--recover-seconds", "5"]) == 2  # no --recover
    assert "add --recover" in capsys.readouterr().err
    assert cli.main(argv + ["--head", "full"]) == 2
    assert "--recover fits a low-rank head" in capsys.readouterr().err
