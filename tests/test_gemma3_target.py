"""The embedded Gemma-3-270M target on its real weights: the plain question format of a base model, and lossless
drafting where the head dominates (262,144 tokens) with prompts longer than its 512-token sliding window."""

import pytest
import torch

from slimspec_hf import SlimSpecDrafterConfig, SlimSpecDrafterForCausalLM
from slimspec_hf.prompt_formats import STOP_STRINGS, code_prompt, cut_at_stop, question_prompt
from slimspec_hf.training.data import tokenize_conversation


pytestmark = pytest.mark.integration

NEW_TOKENS = 16
# Long enough to pass the window of the sliding layers (five of every six): the window masks of tree rounds matter.
LONG_TEXT = " ".join(
    f"Step {i}: the drafter proposes tokens, the target verifies them in one forward pass and keeps the longest "
    f"prefix it agrees with."
    for i in range(30)
)
SETTINGS = {
    "chain": dict(num_assistant_tokens=3),
    "hybrid lookup": dict(num_assistant_tokens=3, draft_lookup=True),
    "tree": dict(draft_tree_size=6, draft_tree_depth=3, draft_tree_top_k=2),
    "tree + lookup branch": dict(
        draft_tree_size=4, draft_tree_depth=2, draft_tree_top_k=2, draft_lookup=True, draft_lookup_branch_ngram=1
    ),
}


@pytest.fixture(scope="module")
def gemma_drafter(gemma_target):
    """An untrained SlimSpec drafter for the real target (rank 80 = d/8): losslessness holds for any drafter, and
    prompt lookup makes rounds accept several tokens on repetitive text."""
    model, _ = gemma_target
    torch.manual_seed(0)
    config = SlimSpecDrafterConfig.from_target_config(model.config)
    return SlimSpecDrafterForCausalLM(config).eval().attach_target(model)


def test_the_real_target_is_the_base_model_with_its_facts(gemma_target):
    model, tokenizer = gemma_target
    config = model.config
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers) == (262144, 640, 18)
    assert config.sliding_window == 512 and config.layer_types.count("sliding_attention") == 15
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied
    assert model.name_or_path == "google/gemma-3-270m"


def test_the_question_format_renders_append_only_and_masks_the_answer(gemma_target):
    _, tokenizer = gemma_target
    messages = [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "4."}]
    text = tokenizer.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True)
    assert text == "<bos>" + question_prompt("What is 2 + 2?")
    enc = tokenize_conversation(tokenizer, messages)
    answer = tokenizer.decode([t for t, m in zip(enc["input_ids"], enc["loss_mask"]) if m])
    assert answer.strip() == "4."
    assert cut_at_stop(" 4.\nQuestion: What is 3 + 3?", STOP_STRINGS) == (" 4.", True)
    assert code_prompt("def f(x):", "Double x.") == 'def f(x):\n    """Double x."""\n'


@pytest.fixture(scope="module")
def long_prompt(gemma_target):
    """A prompt past the window and the target's own greedy answer to it, computed once."""
    model, tokenizer = gemma_target
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": LONG_TEXT + " Repeat the last step."}], tokenize=False, add_generation_prompt=True
    )
    inputs = tokenizer(text, return_tensors="pt", add_special_tokens=False)
    assert inputs["input_ids"].shape[1] > 512
    return inputs, model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)


@pytest.mark.parametrize("name", list(SETTINGS))
def test_drafting_is_lossless_past_the_sliding_window(gemma_target, gemma_drafter, long_prompt, name):
    model, _ = gemma_target
    inputs, plain = long_prompt
    fast = model.generate(
        **inputs, max_new_tokens=NEW_TOKENS, do_sample=False, assistant_model=gemma_drafter, **SETTINGS[name]
    )
    assert fast.tolist() == plain.tolist()
    stats = gemma_drafter.last_generation_stats
    if "lookup" in name:  # the repetitive prompt: lookup drafts get accepted, several tokens a round
        assert stats.accepted_tokens > 0


def test_a_left_padded_batch_of_four_is_lossless(gemma_target, gemma_drafter):
    model, tokenizer = gemma_target
    questions = [
        LONG_TEXT + " Which step comes next?",
        "What is the capital of France?",
        "Name three colours.",
        "Count to ten.",
    ]
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        for q in questions
    ]
    tokenizer.padding_side = "left"
    inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    assert inputs["input_ids"].shape[1] > 512
    plain = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
    fast = model.generate(
        **inputs,
        max_new_tokens=NEW_TOKENS,
        do_sample=False,
        assistant_model=gemma_drafter,
        draft_tree_size=3,
        draft_tree_depth=1,
        draft_tree_top_k=3,
        draft_lookup=True,
        draft_max_batch_size=0,
    )
    assert fast.tolist() == plain.tolist()


def test_the_shipped_drafter_is_lossless_and_accepts_on_the_real_target(gemma_target):
    """`drafters/gemma-3-270m-slimspec/` with its shipped defaults (`auto` shapes, lookup) and as a fixed chain of 6
    with lookup: fp32 greedy output identical to the target's own, and the drafts accepted."""
    from slimspec_hf import load_embedded_drafter
    from slimspec_hf.targets import embedded_target

    model, tokenizer = gemma_target
    drafter = load_embedded_drafter(embedded_target("gemma-3-270m").drafter_dir, target=model)
    prompt = question_prompt("Name the planets of the solar system in order, and say one fact about each.")
    inputs = tokenizer(prompt, return_tensors="pt")
    kwargs = dict(max_new_tokens=48, do_sample=False)
    plain = model.generate(**inputs, **kwargs)
    for shape in ("auto", "fixed"):
        out = model.generate(**inputs, assistant_model=drafter, draft_shape=shape, **kwargs)
        assert torch.equal(out, plain), shape
    # the fixed chain (fp32): τ 1.42 at step 626, the drafter's own first tokens accepted in 12 of 33 rounds
    assert drafter.last_generation_stats.acceptance_length > 1.25
