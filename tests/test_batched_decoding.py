"""Batched SlimSpec decoding: `target.generate(**batch, assistant_model=drafter)` with B > 1 left-padded prompts.

Every row drafts and accepts on its own, one target forward verifies all rows, and the shared target cache is
realigned so that each row keeps only its accepted tokens. fp32 greedy output equals plain batched greedy row for
row; sampled rows follow the target's exact distribution (χ²), and both fail when a part is broken on purpose."""

import pytest
import torch

from slimspec_hf import SlimSpecGenerationStats, decoding_slimspec, verification_slimspec

from .testing_utils import (
    CHI2_999,
    FAMILIES,
    LIVE_EOS,
    WINDOW,
    DraftWatch,
    assert_deep_drafts_accepted_and_rejected,
    chi_square,
    exact_marginals,
    make_char_tokenizer,
    make_counting_drafter,
    make_counting_target,
    make_family_target,
    make_live_target,
    make_oracle_drafter,
    make_tiny_drafter,
    make_tiny_target,
)


MODES = {
    "chain": dict(num_assistant_tokens=3),
    "hybrid": dict(num_assistant_tokens=1, draft_lookup=True),
    "tree+lookup": dict(draft_tree_size=8, draft_tree_depth=3, draft_tree_top_k=3, draft_lookup=True),
}


def left_padded(prompts: list[list[int]], pad: int = 0) -> tuple[torch.LongTensor, torch.LongTensor]:
    length = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), length), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, prompt in enumerate(prompts):
        ids[i, length - len(prompt) :] = torch.tensor(prompt)
        mask[i, length - len(prompt) :] = 1
    return ids, mask


def random_prompts(vocab_size: int, lengths, seed: int = 0) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab_size, (n,), generator=generator).tolist() for n in lengths]


@pytest.mark.parametrize("family", FAMILIES)
def test_batched_greedy_equals_plain_batched_greedy_for_every_family(family):
    """With a drafter right at most positions, every row accepts and rejects deep drafts: the shared cache is rolled
    back per row, under each family's attention (sliding windows counted in each row's positions)."""
    target = make_family_target(family, vocab_size=16)
    drafter = make_oracle_drafter(target)
    # rows of very different lengths, two longer than the sliding window
    ids, mask = left_padded(random_prompts(16, (2 * WINDOW + 3, 3, 2 * WINDOW - 2, 9)))
    settings = dict(max_new_tokens=24, do_sample=False, pad_token_id=0)
    plain = target.generate(ids, attention_mask=mask, **settings)
    drafter.teach(*[row[int((m == 0).sum()) :].tolist() for row, m in zip(plain, mask)])  # no left padding
    rounds = []
    for mode, draft in MODES.items():
        fast = target.generate(ids, attention_mask=mask, assistant_model=drafter, **settings, **draft)
        assert fast.tolist() == plain.tolist(), mode
        stats = drafter.last_generation_stats
        assert len(stats.per_row) == 4 and stats.rounds == sum(row.rounds for row in stats.per_row)
        assert stats.accepted_tokens == sum(row.accepted_tokens for row in stats.per_row)
        rounds.append(stats)
    assert_deep_drafts_accepted_and_rejected(SlimSpecGenerationStats.combined(rounds), depth=2)


@pytest.mark.parametrize("mode", ["chain-1", "chain-3", "tree"])
def test_batched_greedy_with_eos_inside_a_round_and_the_length_boundary(mode, monkeypatch):
    """Rows of a live target stop at different rounds (EOS accepted inside a round, or the length limit) and are
    padded as transformers pads; a drafter right at most positions makes each row accept and reject deep drafts
    (per-row rollback of the shared cache); every row's drafter state after a commit, and every tree level's states
    and logits of every row, equal an unpadded, cacheless recompute of that row alone (padded rows' drafts depend
    on neither the padding nor the other rows)."""
    target = make_live_target(eos_token_id=LIVE_EOS)
    drafter = make_oracle_drafter(target)
    watch = DraftWatch(monkeypatch, levels=True)
    draft = {"chain-1": dict(num_assistant_tokens=1), "chain-3": dict(num_assistant_tokens=3)}.get(
        mode, dict(draft_tree_size=8, draft_tree_depth=3, draft_tree_top_k=3)
    )
    saw_eos_row, rounds = False, []
    for i in range(5):
        prompts = random_prompts(128, (2 + i % 3, 5, 1 + (3 * i) % 7), seed=10 * i + len(mode))
        ids, mask = left_padded(prompts)
        settings = dict(max_new_tokens=5 + (i * 7) % 23, do_sample=False, pad_token_id=0)
        plain = target.generate(ids, attention_mask=mask, **settings)
        drafter.teach(*[row[int((m == 0).sum()) :].tolist() for row, m in zip(plain, mask)])  # no left padding
        fast = target.generate(ids, attention_mask=mask, assistant_model=drafter, **draft, **settings)
        assert fast.tolist() == plain.tolist(), i
        rounds.append(drafter.last_generation_stats)
        saw_eos_row |= bool(((plain == LIVE_EOS).any(-1) & (plain[:, -1] == 0)).any())
        watch.check(target, drafter)
    assert saw_eos_row  # a row ended with EOS before the others and was padded
    assert mode == "chain-1" or watch.checked_levels > 30, watch.checked_levels  # a chain of 1 has no level
    total = SlimSpecGenerationStats.combined(rounds)
    assert_deep_drafts_accepted_and_rejected(total, depth=1 if mode == "chain-1" else 3)


def test_per_row_rollback_is_what_keeps_rows_exact(monkeypatch):
    """Rows that keep every verified column (no per-row rollback: `DynamicCache.crop` is batch-wide) let other rows'
    rejected drafts reach attention: the output is no longer plain greedy decoding."""
    target = make_family_target("llama", vocab_size=16)
    drafter = make_tiny_drafter(target)
    ids, mask = left_padded(random_prompts(16, (9, 4, 12)))
    settings = dict(max_new_tokens=24, do_sample=False, pad_token_id=0, **MODES["hybrid"])
    plain = target.generate(ids, attention_mask=mask, max_new_tokens=24, do_sample=False, pad_token_id=0)
    exact = target.generate(ids, attention_mask=mask, assistant_model=drafter, **settings)
    assert exact.tolist() == plain.tolist()
    commit = verification_slimspec.TargetSlots.commit

    def keep_everything(self, cache, positions, keeps):
        longest = max(int(keep.max()) for keep in keeps) + 1
        commit(self, cache, positions, [torch.arange(longest)] * len(keeps))

    monkeypatch.setattr(verification_slimspec.TargetSlots, "commit", keep_everything)
    broken = target.generate(ids, attention_mask=mask, assistant_model=drafter, **settings)
    assert broken.tolist() != plain.tolist()


def _batched_counts(target, drafter, prompts, n, settings):
    ids, mask = left_padded(prompts)
    torch.manual_seed(0)
    counts = torch.zeros(len(prompts), 3, target.config.vocab_size)
    for _ in range(n):
        out = target.generate(
            ids, attention_mask=mask, max_new_tokens=3, do_sample=True, top_k=0, pad_token_id=0,
            assistant_model=drafter, **settings,
        )  # fmt: skip
        for b in range(len(prompts)):
            for j in range(3):
                counts[b, j, out[b, ids.shape[1] + j]] += 1
    return counts


def _worst_chi_square(target, prompts, counts) -> float:
    """The largest χ² statistic over rows and tokens 2–3, each divided by its 99.9% critical value."""
    worst = 0.0
    for b, prompt in enumerate(prompts):
        exact = exact_marginals(target, torch.tensor([prompt]), 3)
        for j in (1, 2):  # tokens 2 and 3 come through the acceptance rule
            stat, dof = chi_square(counts[b, j], exact[j])
            worst = max(worst, stat / CHI2_999[dof - 1])
    return worst


@pytest.mark.parametrize("mode", ["hybrid", "tree+lookup"])
def test_batched_sampling_matches_the_target_distribution_at_batch_4(mode, monkeypatch):
    target = make_family_target("mistral", seed=21, vocab_size=12)
    with torch.no_grad():
        target.lm_head.weight.mul_(3)  # a peaked, non-uniform target distribution
    drafter = make_tiny_drafter(target, head_type="full", seed=4)
    prompts = [[1, 5, 3, 7, 2, 9, 4, 1, 5], [3, 1], [2, 2, 8, 2, 2], [6, 4, 11, 0, 6, 4, 11]]
    settings = dict(MODES[mode], draft_lookup_min_ngram=2, draft_lookup_extend_ngram=1)
    counts = _batched_counts(target, drafter, prompts, 400, settings)
    assert _worst_chi_square(target, prompts, counts) < 1.0
    # the same test fails for an acceptance rule that always accepts the draft
    monkeypatch.setattr(decoding_slimspec, "accepts", lambda p_token, q_token: True)
    counts = _batched_counts(target, drafter, prompts, 400, settings)
    assert _worst_chi_square(target, prompts, counts) > 1.0


def test_batched_return_dict_pipeline_and_clear_refusals():
    from transformers import LogitsProcessor, LogitsProcessorList, pipeline
    from transformers.generation.streamers import BaseStreamer

    target = make_tiny_target(seed=5, eos_token_id=1)
    drafter = make_tiny_drafter(target)
    ids, mask = left_padded(random_prompts(128, (3, 7)), pad=1)
    settings = dict(max_new_tokens=6, pad_token_id=1, do_sample=False, return_dict_in_generate=True)
    plain = target.generate(ids, attention_mask=mask, **settings)
    out = target.generate(ids, attention_mask=mask, assistant_model=drafter, **settings)
    assert isinstance(out, type(plain))  # transformers' output, with the call's statistics as one field more
    assert out.sequences.tolist() == plain.sequences.tolist()
    assert out.slimspec_stats is drafter.last_generation_stats and len(out.slimspec_stats.per_row) == 2
    # no scores, logits, attentions or hidden states were asked for: None, as in plain decoding (asking is refused)
    for name in ("scores", "logits", "attentions", "hidden_states"):
        assert getattr(out, name) is None and getattr(plain, name) is None, name

    tokenizer = make_char_tokenizer()
    tokenizer.pad_token, tokenizer.padding_side = "</s>", "left"
    pipe = pipeline("text-generation", model=target, tokenizer=tokenizer)
    texts = ["Hello there", "Hi", "A longer third prompt"]
    plain = pipe(texts, max_new_tokens=12, do_sample=False, batch_size=3)
    fast = pipe(texts, max_new_tokens=12, do_sample=False, batch_size=3, assistant_model=drafter)
    assert [r[0]["generated_text"] for r in fast] == [r[0]["generated_text"] for r in plain]
    assert len(drafter.last_generation_stats.per_row) == 3  # one batched call drafted for the three prompts

    class Collecting(BaseStreamer):  # takes any shape (transformers' TextStreamer refuses B > 1 itself)
        def put(self, value):
            pass

        def end(self):
            pass

    with pytest.raises(ValueError, match="batch size 1 only"):
        target.generate(ids, attention_mask=mask, max_new_tokens=4, assistant_model=drafter, streamer=Collecting())
    with pytest.raises(ValueError, match="returns `sequences` only"):
        target.generate(ids, attention_mask=mask, max_new_tokens=4, assistant_model=drafter,
                        return_dict_in_generate=True, output_scores=True)  # fmt: skip

    class BatchState(LogitsProcessor):
        def __call__(self, input_ids, scores):
            return scores

    with pytest.raises(ValueError, match="BatchState"):
        target.generate(ids, attention_mask=mask, max_new_tokens=4, assistant_model=drafter,
                        logits_processor=LogitsProcessorList([BatchState()]))  # fmt: skip


@pytest.mark.integration
def test_batched_greedy_on_the_real_smollm2_equals_plain_batched_greedy(embedded_target):
    from transformers import AutoModelForCausalLM

    from slimspec_hf.targets import EMBEDDED_DRAFTER_DIR

    target, tokenizer = embedded_target
    drafter = AutoModelForCausalLM.from_pretrained(EMBEDDED_DRAFTER_DIR, dtype=torch.float32)
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    chats = ["What is 12 times 7?", "Write a haiku about the sea.", "List three primary colours."]
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": c}], tokenize=False,
                                           add_generation_prompt=True) for c in chats]  # fmt: skip
    inputs = tokenizer(texts, return_tensors="pt", padding=True)
    tokenizer.padding_side = side
    plain = target.generate(**inputs, max_new_tokens=32, do_sample=False)
    # its fixed batched shape: `auto` would choose from this machine's timings, so its acceptance would vary
    fast = target.generate(**inputs, max_new_tokens=32, do_sample=False, assistant_model=drafter, draft_shape="fixed")
    assert fast.tolist() == plain.tolist()
    assert drafter.last_generation_stats.acceptance_length > 1.2


def test_draft_batched_settings_apply_to_batches_only():
    from slimspec_hf import DraftSettings

    target = make_counting_target()
    drafter = make_counting_drafter(target)
    drafter.generation_config.draft_lookup = True
    drafter.generation_config.num_assistant_tokens = 3
    drafter.generation_config.draft_batched = {"draft_lookup": False, "num_assistant_tokens": 1}
    config = drafter.generation_config
    assert DraftSettings.resolve(config, batched=False).draft_lookup
    batched = DraftSettings.resolve(config, batched=True)
    assert not batched.draft_lookup and batched.num_assistant_tokens == 1
    mine = DraftSettings.resolve(config, {"draft_batched": {"num_assistant_tokens": 2}}, batched=True)
    assert mine.num_assistant_tokens == 2 and not mine.draft_lookup  # the caller's batched setting on the drafter's
    prompt = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6]  # repeats: lookup drafts when it may
    ids, mask = left_padded([prompt, prompt[2:]])
    target.generate(ids[:1], max_new_tokens=12, do_sample=False, assistant_model=drafter)
    assert drafter.last_generation_stats.rounds_by_source.get("lookup", 0) > 0
    target.generate(
        ids, attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0, assistant_model=drafter
    )
    stats = drafter.last_generation_stats
    assert set(stats.rounds_by_source) == {"drafter"} and stats.drafted_per_position[1:] == []  # chains of 1
    with pytest.raises(ValueError, match="draft_batched.*tree_size"):
        DraftSettings.resolve(config, {"draft_batched": {"tree_size": 2}}, batched=True)


def test_batches_above_draft_max_batch_size_decode_without_the_drafter():
    target = make_counting_target()
    drafter = make_counting_drafter(target)
    drafter.generation_config.draft_max_batch_size = 2
    ids, mask = left_padded([[5, 6, 7], [9, 10], [20, 21, 22]])
    settings = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    plain = target.generate(ids, attention_mask=mask, **settings)
    assert target.generate(ids, attention_mask=mask, assistant_model=drafter, **settings).tolist() == plain.tolist()
    assert drafter.last_generation_stats.rounds == 0  # three prompts: plain batched decoding
    two = target.generate(ids[:2], attention_mask=mask[:2], assistant_model=drafter, **settings)
    assert two.tolist() == plain[:2, : two.shape[1]].tolist() and drafter.last_generation_stats.rounds > 0
    fast = target.generate(ids, attention_mask=mask, assistant_model=drafter, draft_max_batch_size=0, **settings)
    assert fast.tolist() == plain.tolist() and drafter.last_generation_stats.rounds > 0  # a caller lifts the limit
