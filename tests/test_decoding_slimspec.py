"""SlimSpec decoding (`decoding_slimspec`, `drafting_slimspec`): trees and chains, lookup, greedy and sampled."""

import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from slimspec_hf import DraftSettings, SlimSpecGenerationStats, decoding_slimspec, drafting_slimspec
from slimspec_hf.cache_slimspec import SlimSpecDrafterCache
from slimspec_hf.decoding_slimspec import SpeculativeDecoder, TargetLogits, plain_lm_head, slimspec_generate
from slimspec_hf.drafting_slimspec import ROOT, DecodingSequence

from .testing_utils import (
    CHI2_999,
    LIVE_EOS,
    REPO_ROOT,
    DraftWatch,
    assert_deep_drafts_accepted_and_rejected,
    chi_square,
    exact_marginals,
    make_counting_drafter,
    make_counting_target,
    make_drafter_for,
    make_live_target,
    make_oracle_drafter,
    make_tiny_drafter,
    make_tiny_target,
)


TREES = [(16, 4, 4), (5, 3, 2), (32, 6, 8)]  # (tree_size, tree_depth, tree_top_k)


def tree_generate(target, ids, drafter, tree=(16, 4, 4), **kwargs):
    size, depth, top_k = tree
    return target.generate(
        ids, assistant_model=drafter, draft_tree_size=size, draft_tree_depth=depth, draft_tree_top_k=top_k, **kwargs
    )


class Tok:  # the smallest tokenizer a TextStreamer needs
    def decode(self, ids, **kwargs):
        return " ".join(str(int(i)) for i in ids) + " "


# -- greedy identity --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("head", ["low_rank", "full", "trimmed"])
def test_greedy_identity_random_drafter(head):
    target = make_tiny_target(seed=11)
    drafter = make_drafter_for(target, head)
    generator = torch.Generator().manual_seed(0)
    for i in range(12):
        ids = torch.randint(0, 128, (1, 3 + i % 9), generator=generator)
        plain = target.generate(ids, max_new_tokens=8 + i, do_sample=False)
        for tree in [*TREES[:2], (4, 1, 4)]:  # depth 1: the root's children only, no drafter level forward
            fast = tree_generate(target, ids, drafter, tree, max_new_tokens=8 + i, do_sample=False)
            assert fast.tolist() == plain.tolist(), (i, tree)
            assert drafter.last_generation_stats.rounds > 0


@pytest.mark.parametrize("tree", TREES)
def test_greedy_identity_on_a_live_target_with_eos_and_length_boundary(tree, monkeypatch):
    """Trees on a live target with a drafter whose runner-up child is sometimes the right one: accepted paths leave
    the first verified rows (the target's cache keeps the path's rows, not the first ones), deep drafts are accepted
    and rejected, EOS is accepted inside a round, the last rounds hit the length limit; the drafter's state after
    every commit equals a fresh one's."""
    target = make_live_target(eos_token_id=LIVE_EOS)
    drafter = make_oracle_drafter(target)
    watch = DraftWatch(monkeypatch)
    generator = torch.Generator().manual_seed(tree[0])
    saw_eos_inside, saw_exact_length, rounds = False, False, []
    for i in range(8):
        ids = torch.randint(0, 128, (1, 2 + i % 5), generator=generator)
        max_new = 5 + (i * 7) % 23
        plain = target.generate(ids, max_new_tokens=max_new, do_sample=False)
        drafter.teach(plain[0].tolist())
        fast = tree_generate(target, ids, drafter, tree, max_new_tokens=max_new, do_sample=False)
        assert fast.tolist() == plain.tolist(), f"prompt {i}"
        stats = drafter.last_generation_stats
        assert len(stats.drafted_per_position) <= tree[1]
        rounds.append(stats)
        new = plain[0, ids.shape[1] :].tolist()
        saw_eos_inside |= LIVE_EOS in new[1:]
        saw_exact_length |= LIVE_EOS not in new and len(new) == max_new
        watch.check(target, drafter)
    assert saw_eos_inside and saw_exact_length and watch.checked > 10
    total = SlimSpecGenerationStats.combined(rounds)
    assert_deep_drafts_accepted_and_rejected(total, depth=3)
    assert total.acceptance_length > 2


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_greedy_identity_accepting_deep_paths_on_a_live_target(attention):
    """The target's tree mask (eager, and sdpa's own path), node positions and cache compaction, with and without
    prompt lookup grafted on the drafter's tree: accepted nodes sit deep in the tree."""
    target = make_live_target(seed=7)
    target.set_attn_implementation(attention)
    drafter = make_oracle_drafter(target)
    generator = torch.Generator().manual_seed(2)
    rounds, sources = [], set()
    for i, tree in enumerate([(16, 4, 4), (6, 5, 2), (12, 6, 2)]):
        ids = torch.randint(0, 128, (1, 5 + i), generator=generator)
        ids = torch.cat([ids, ids[:, :3]], dim=-1)  # a repeat: prompt lookup has matches
        plain = target.generate(ids, max_new_tokens=30, do_sample=False)
        drafter.teach(plain[0].tolist())
        for lookup, branch in ((False, 0), (True, 0), (True, 1)):  # branch: every match also its own branch
            fast = tree_generate(
                target, ids, drafter, tree, max_new_tokens=30, do_sample=False, draft_lookup=lookup,
                draft_lookup_min_ngram=3, draft_lookup_extend_ngram=1, draft_lookup_branch_ngram=branch,
            )  # fmt: skip
            assert fast.tolist() == plain.tolist(), (tree, lookup, branch)
            rounds.append(drafter.last_generation_stats)
            sources |= set(drafter.last_generation_stats.rounds_by_source)
    total = SlimSpecGenerationStats.combined(rounds)
    assert_deep_drafts_accepted_and_rejected(total, depth=4)
    assert total.acceptance_length > 2.5 and {"drafter", "drafter+lookup"} <= sources, sources


def test_lm_head_runs_on_the_likely_path_first_and_the_subtree_on_a_miss(monkeypatch):
    """The target's LM head covers the root + the best-scored path first; a walk that takes a runner-up child gets
    that child's subtree in a second batch. Same output as plain greedy either way, and as all rows at once."""
    target = make_live_target(seed=7)
    drafter = make_oracle_drafter(target)  # its runner-up is sometimes the right child: misses
    rounds = []  # every drafted round's TargetLogits
    logits_init = TargetLogits.__init__

    def watched(self, tree, *args, **kwargs):
        logits_init(self, tree, *args, **kwargs)
        if tree.tokens:  # the prefill's first token is a round of an empty tree
            rounds.append(self)

    monkeypatch.setattr(TargetLogits, "__init__", watched)
    ids = torch.randint(0, 128, (1, 6), generator=torch.Generator().manual_seed(3))
    plain = target.generate(ids, max_new_tokens=30, do_sample=False)
    drafter.teach(plain[0].tolist())
    assert tree_generate(target, ids, drafter, (16, 4, 4), max_new_tokens=30, do_sample=False).tolist() == (
        plain.tolist()
    )
    firsts = [r.batches[0] for r in rounds]  # each round's first LM-head call: the root's
    assert firsts and all(n <= 1 + 4 + 3 for n in firsts)  # root + 4 children + a path below
    assert any(len(r.batches) > 1 for r in rounds)  # some walks left the likely path
    assert sum(sum(r.batches) for r in rounds) < sum(len(r.rows) for r in rounds)  # fewer rows than verified

    init = SpeculativeDecoder.__init__

    def eager_head(self, *args):  # as for a half-precision target: every row in one batch
        init(self, *args)
        self.lazy_head = False

    monkeypatch.setattr(SpeculativeDecoder, "__init__", eager_head)
    rounds.clear()
    assert tree_generate(target, ids, drafter, (16, 4, 4), max_new_tokens=30, do_sample=False).tolist() == (
        plain.tolist()
    )
    assert rounds and all(r.batches == [len(r.rows)] for r in rounds)  # one batch per round, all rows

    monkeypatch.setattr(decoding_slimspec, "plain_lm_head", lambda target: None)  # all rows through the target
    rounds.clear()
    assert tree_generate(target, ids, drafter, (16, 4, 4), max_new_tokens=30, do_sample=False).tolist() == (
        plain.tolist()
    )
    assert rounds and not any(r.batches for r in rounds)


def test_targets_with_logit_transforms_keep_their_own_forward():
    target = make_tiny_target(seed=1)
    assert plain_lm_head(target) is target.lm_head
    target.config.final_logit_softcapping = 30.0
    assert plain_lm_head(target) is None


@pytest.mark.parametrize("batched", [True, False])
def test_processors_run_per_level_in_one_batch_or_row_by_row(batched, monkeypatch):
    """Row-wise processors (repetition penalty, no-repeat n-grams, min length) see a level's frontier as one batch;
    any other processor one row at a time. Both are plain greedy, scores included."""
    from transformers import LogitsProcessor, LogitsProcessorList

    class Shift(LogitsProcessor):  # not on the row-wise list: must see a batch of 1
        def __call__(self, input_ids, scores):
            assert input_ids.shape[0] == 1
            return scores + 0.01 * (input_ids[:, -1:] % 3)

    calls = []
    process = drafting_slimspec.LogitsProcessing.__call__
    monkeypatch.setattr(
        drafting_slimspec.LogitsProcessing,
        "__call__",
        lambda self, ids, x: calls.append(ids.shape[0]) or process(self, ids, x),
    )
    target = make_tiny_target(seed=5)
    drafter = make_drafter_for(target, "low_rank")
    kwargs = dict(max_new_tokens=20, do_sample=False, repetition_penalty=1.3, no_repeat_ngram_size=3, min_length=12)
    kwargs.update(return_dict_in_generate=True, output_scores=True)
    if not batched:
        kwargs["logits_processor"] = LogitsProcessorList([Shift()])
    ids = torch.tensor([[7, 8, 9, 10, 7, 8]])
    plain = target.generate(ids, **kwargs)
    fast = tree_generate(target, ids, drafter, (16, 4, 4), **kwargs)
    assert fast.sequences.tolist() == plain.sequences.tolist()
    for a, b in zip(fast.scores, plain.scores):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert (max(calls) > 1) == batched


def test_statistics_of_an_always_right_drafter():
    target = make_counting_target()
    drafter = make_counting_drafter(target)
    drafter.wrong_every = 10_000  # never wrong
    ids = torch.tensor([[3, 4, 5]])
    out = tree_generate(target, ids, drafter, (8, 4, 2), max_new_tokens=21, do_sample=False)
    assert out[0, 3:].tolist() == [(6 + i) % 128 for i in range(21)]
    stats = drafter.last_generation_stats
    # 1 token from the prefill, then 4 rounds of 4 accepted + 1 bonus = 20 tokens
    assert (stats.rounds, stats.accepted_tokens, stats.drafted_tokens) == (4, 16, 32)
    assert stats.acceptance_length == pytest.approx(5.0)
    assert stats.per_position_acceptance == [1.0] * 4


def test_a_one_wide_tree_is_the_chain():
    """top_k = 1 and size = depth = k drafts the chain's k tokens: the same acceptance as `num_assistant_tokens=k`
    (the drafter's states along a path are checked against a chain in the next test)."""
    target = make_live_target(seed=1)
    drafter = make_oracle_drafter(target)  # right at most positions: rounds end in partial acceptance
    generator = torch.Generator().manual_seed(1)
    for i in range(4):
        ids = torch.randint(0, 128, (1, 4 + i), generator=generator)
        plain = target.generate(ids, max_new_tokens=25, do_sample=False)
        drafter.teach(plain[0].tolist())
        chain = target.generate(
            ids, max_new_tokens=25, do_sample=False, assistant_model=drafter, num_assistant_tokens=3
        )
        chain_stats = drafter.last_generation_stats.as_dict()
        fast = tree_generate(target, ids, drafter, (3, 3, 1), max_new_tokens=25, do_sample=False)
        assert fast.tolist() == chain.tolist() == plain.tolist()
        assert drafter.last_generation_stats.as_dict() == chain_stats
        assert 0 < chain_stats["accepted_tokens"] < 3 * chain_stats["rounds"]


def test_tree_forward_matches_each_path_run_as_a_chain():
    """The drafter's states of every expanded node (one forward per level, 4-D tree mask) equal those of a chain
    forward along that node's path."""
    target = make_tiny_target(seed=4)
    drafter = make_drafter_for(target, "low_rank")
    ids = torch.randint(0, 128, (1, 9), generator=torch.Generator().manual_seed(0))
    config = target.generation_config
    config.do_sample, config.max_length = False, 64
    settings = DraftSettings(draft_tree_size=20, draft_tree_depth=4, draft_tree_top_k=3)
    seq = DecodingSequence(ids, None)
    decoder = SpeculativeDecoder(target, drafter, config, None, settings, None, [seq])
    with torch.no_grad():
        out = target(ids, output_hidden_states=decoder.layer_ids)
    decoder.state.add_target_features(0, out.hidden_states, torch.arange(ids.shape[1] - 1))  # token 8 is the root
    features = decoder.state.pending[0][0]
    with torch.no_grad():
        root_logits, root_states = decoder.state.commit([seq])
        (tree,) = decoder.proposer.draft([seq], [0], root_logits, root_states, [4])
    expanded = list(tree.slots)
    assert len(expanded) == 3 * 3  # levels 1..3, three nodes each
    assert all(len({tree.tokens[c] for c in range(len(tree.tokens)) if tree.parents[c] == n}) == 3 for n in expanded)
    for node in expanded:
        path = tree.path(node)
        cache = SlimSpecDrafterCache()
        with torch.no_grad():
            chain = drafter(
                input_ids=ids[:, 1:], target_features=features, cache=cache, use_cache=True, logits_to_keep=1
            )
            state = chain.hidden_states[:, -1:]
            for j, step in enumerate(path):
                chain = drafter(
                    input_ids=torch.tensor([[tree.tokens[step]]]),
                    hidden_states=state,
                    position_ids=torch.tensor([[ids.shape[1] - 1 + j]]),
                    cache=cache,
                    use_cache=True,
                )
                state = chain.hidden_states
        torch.testing.assert_close(tree.states[node], state[0, 0], rtol=1e-4, atol=1e-5)
    # reranked: the kept nodes are ancestor-closed, and the best by cumulative log-probability
    kept = tree.kept
    assert all(tree.parents[n] == ROOT or tree.parents[n] in kept for n in kept)
    assert min(tree.scores[n] for n in kept) >= max(tree.scores[n] for n in range(len(tree.tokens)) if n not in kept)


# -- stopping, streaming, dict output, padding ------------------------------------------------------------------


def test_streamer_dict_output_scores_and_left_padding(capsys):
    from transformers import TextStreamer

    target = make_tiny_target(seed=5)
    drafter = make_drafter_for(target, "low_rank")
    ids = torch.tensor([[0, 0, 7, 8, 9, 10]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1]])
    kwargs = dict(max_new_tokens=15, do_sample=False, repetition_penalty=1.3)
    plain = target.generate(
        input_ids=ids, attention_mask=mask, return_dict_in_generate=True, output_scores=True, **kwargs
    )
    fast = target.generate(
        input_ids=ids,
        attention_mask=mask,
        custom_generate=slimspec_generate,
        drafter=drafter,
        draft_settings={"draft_tree_size": 16},
        return_dict_in_generate=True,
        output_scores=True,
        output_logits=True,
        **kwargs,
    )
    assert fast.sequences.tolist() == plain.sequences.tolist()
    assert len(fast.scores) == len(fast.logits) == 15
    for a, b in zip(fast.scores, plain.scores):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)

    streamer = TextStreamer(Tok())
    target.generate(
        input_ids=ids,
        attention_mask=mask,
        assistant_model=drafter,
        draft_tree_size=16,
        streamer=streamer,
        **kwargs,
    )
    printed = capsys.readouterr().out.split()
    assert [int(t) for t in printed] == plain.sequences[0].tolist()


def test_invalid_settings_fail_loudly():
    target = make_tiny_target()
    drafter = make_tiny_drafter(target)
    ids = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match="`draft_tree_depth` must be an integer >= 1, got 0"):
        tree_generate(target, ids, drafter, (4, 0, 4), max_new_tokens=4)
    with pytest.raises(ValueError, match="`draft_lookup_branch_ngram` must be an integer >= 0, got -1"):
        tree_generate(target, ids, drafter, max_new_tokens=4, draft_lookup=True, draft_lookup_branch_ngram=-1)
    with pytest.raises(ValueError, match="SlimSpec drafter"):
        target.generate(ids, custom_generate=slimspec_generate, drafter=make_tiny_target(), max_new_tokens=4)
    with pytest.raises(ValueError, match="draft_sampling.*not decoding settings"):
        tree_generate(target, ids, drafter, max_new_tokens=4, draft_sampling={"tree_size": 3})
    with pytest.raises(ValueError, match="as `drafter=`"):  # a caller's own `custom_generate` comes first
        target.generate(ids, max_new_tokens=4, custom_generate=slimspec_generate, assistant_model=drafter)
    with pytest.raises(ValueError, match="output_attentions"):
        tree_generate(target, ids, drafter, max_new_tokens=4, return_dict_in_generate=True, output_attentions=True)
    with pytest.raises(ValueError, match="vocab_size \\(100\\)"):
        tree_generate(target, ids, make_tiny_drafter(make_tiny_target(vocab_size=100)), max_new_tokens=4)
    with pytest.raises(ValueError, match="DynamicCache"):
        tree_generate(target, ids, drafter, max_new_tokens=4, cache_implementation="static")


def test_custom_generate_folder_loads_like_a_hub_repo(tmp_path, capsys):
    """`generate(custom_generate=<repo>, trust_remote_code=True)` runs `custom_generate/generate.py` from a local
    folder laid out as a Hub repo (offline)."""
    from transformers import TextStreamer

    repo = tmp_path / "tree-repo"
    shutil.copytree(REPO_ROOT / "src" / "slimspec_hf" / "custom_generate", repo / "custom_generate")
    target = make_counting_target(eos_token_id=100)
    drafter = make_counting_drafter(target)
    ids = torch.tensor([[40, 41, 42]])
    plain = target.generate(ids, max_new_tokens=30, do_sample=False)
    fast = target.generate(
        ids,
        custom_generate=str(repo),
        trust_remote_code=True,
        assistant_model=drafter,
        max_new_tokens=30,
        do_sample=False,
        draft_tree_size=8,
        draft_tree_depth=3,
        draft_tree_top_k=2,
        streamer=TextStreamer(Tok()),
    )
    assert fast.tolist() == plain.tolist()
    assert [int(t) for t in capsys.readouterr().out.split()] == plain[0].tolist()
    stats = drafter.last_generation_stats
    assert stats.rounds > 0 and len(stats.drafted_per_position) == 3
    with pytest.raises(ValueError, match="assistant_model"):
        target.generate(ids, custom_generate=str(repo), trust_remote_code=True, max_new_tokens=3)


# -- sampling ---------------------------------------------------------------------------------------------------


def _sampling_pair():
    target = make_tiny_target(seed=21, vocab_size=12)
    with torch.no_grad():
        target.lm_head.weight.mul_(8)  # a peaked, non-uniform target distribution
    drafter = make_tiny_drafter(target, head_type="full", seed=4)
    with torch.no_grad():
        drafter.lm_head.weight.copy_(target.lm_head.weight + 0.5 * torch.randn_like(target.lm_head.weight))
    return target, drafter


def _sample_tokens(target, drafter, prompt, n, seed, tree=(4, 2, 3)):
    torch.manual_seed(seed)
    counts = torch.zeros(3, target.config.vocab_size)
    for _ in range(n):
        out = tree_generate(target, prompt, drafter, tree, max_new_tokens=3, do_sample=True, top_k=0)
        for j in range(3):
            counts[j, out[0, prompt.shape[1] + j]] += 1
    return counts


def deterministic_top_k(q, k=1):
    """EAGLE-2's children: the drafter's top-k, where the rule needs i.i.d. draws (the target's own draws stay)."""
    return q.topk(k, dim=-1).indices


def test_tree_sampling_matches_the_target_distribution(monkeypatch):
    # tree (4, 2, 3): 3 i.i.d. draws per node out of 12 tokens (duplicates), 3 + 9 nodes of which 4 are kept (pruned
    # children get accepted): every branch of the acceptance walk is exercised.
    target, drafter = _sampling_pair()
    prompt = torch.tensor([[1, 5, 3]])
    exact = exact_marginals(target, prompt, 3)
    counts = _sample_tokens(target, drafter, prompt, 1200, seed=0)
    stats = drafter.last_generation_stats
    assert stats.drafted_tokens > 0
    for j in (1, 2):  # tokens 2 and 3 come through the tree's acceptance rule
        stat, dof = chi_square(counts[j], exact[j])
        assert stat < CHI2_999[dof - 1], (j, stat, dof)

    # The same test fails for EAGLE-2's deterministic top-k children under the same rejection rule (measured: 660-680
    # for token 2, against 11-18 for i.i.d. draws) ...
    with monkeypatch.context() as patch:
        patch.setattr(drafting_slimspec, "draw", deterministic_top_k)
        counts = _sample_tokens(target, drafter, prompt, 1200, seed=0)
    stat, dof = chi_square(counts[1], exact[1])
    assert stat > CHI2_999[dof - 1], stat
    # ... and for a broken acceptance rule that always accepts the first draw (measured: ~9600).
    monkeypatch.setattr(decoding_slimspec, "accepts", lambda p, q: True)
    counts = _sample_tokens(target, drafter, prompt, 1200, seed=0)
    stat, dof = chi_square(counts[1], exact[1])
    assert stat > CHI2_999[dof - 1], stat


# -- prompt lookup with trees -----------------------------------------------------------------------------------


@pytest.mark.parametrize("head", ["low_rank", "trimmed"])
def test_tree_with_lookup_verifies_long_matches_alone_and_stays_identical(head):
    target = make_tiny_target(seed=5)
    drafter = make_drafter_for(target, head)
    sources = set()
    for seed in range(4):
        torch.manual_seed(seed)
        ids = torch.randint(0, target.config.vocab_size, (1, 5))
        ids = torch.cat([ids, ids, ids[:, :3]], dim=-1)  # repeated text: lookup drafts exist
        plain = target.generate(ids, max_new_tokens=30, do_sample=False)
        out = target.generate(
            ids, max_new_tokens=30, do_sample=False, assistant_model=drafter, draft_tree_size=6, draft_tree_depth=2,
            draft_lookup=True, draft_lookup_min_ngram=1,
        )  # fmt: skip
        assert out.tolist() == plain.tolist(), seed
        sources |= set(drafter.last_generation_stats.rounds_by_source)
    assert sources <= {"drafter", "lookup", "drafter+lookup"} and "lookup" in sources


def test_tree_with_lookup_grafts_short_matches_the_drafter_agrees_with():
    """Counting target, drafter right but at multiples of 7: a 1-token match whose next token is the drafter's
    is grafted onto the tree (source drafter+lookup), a longer one (2+) is verified alone (lookup)."""
    target = make_counting_target()
    drafter = make_counting_drafter(target)
    sources = set()
    for ids in ([[4, 5, 90, 91, 30, 31, 32, 33, 34, 35, 36, 70, 3]], [[20, 21, 22, 60, 25, 26, 27, 28, 29, 9, 19]]):
        ids = torch.tensor(ids)
        plain = target.generate(ids, max_new_tokens=20, do_sample=False)
        out = target.generate(
            ids, max_new_tokens=20, do_sample=False, assistant_model=drafter, draft_tree_size=6, draft_tree_depth=2,
            draft_lookup=True, draft_lookup_min_ngram=2,
        )  # fmt: skip
        assert out.tolist() == plain.tolist()
        sources |= set(drafter.last_generation_stats.rounds_by_source)
    assert {"drafter+lookup", "lookup"} <= sources, sources


# -- the real SmolLM2 target with the shipped drafter -----------------------------------------------------------


@pytest.mark.integration
def test_greedy_identity_on_smollm2_with_the_shipped_drafter(embedded_target):
    model, tokenizer = embedded_target
    folder = Path(REPO_ROOT) / "drafters" / "smollm2-135m-instruct-slimspec"
    drafter = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    questions = ["What is 2 + 2?", "Name three colours.", "Write a haiku about the sea."]
    for question, tree in zip(questions, [(16, 4, 4), (8, 3, 2), (32, 6, 8)]):
        messages = [{"role": "user", "content": question}]
        inputs = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        plain = model.generate(**inputs, max_new_tokens=40, do_sample=False)
        fast = tree_generate(model, inputs["input_ids"], drafter, tree, max_new_tokens=40, do_sample=False)
        assert fast.tolist() == plain.tolist(), question
        assert drafter.last_generation_stats.acceptance_length > 1.2
    # the hybrid one-level tree (4/1/4 with prompt lookup: lookup rounds, grafts) through generate()
    messages = [{"role": "user", "content": "Repeat twice: the quick brown fox jumps over the lazy dog."}]
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    plain = model.generate(**inputs, max_new_tokens=40, do_sample=False)
    hybrid = {"draft_tree_size": 4, "draft_tree_depth": 1, "draft_tree_top_k": 4, "draft_lookup": True}
    fast = model.generate(**inputs, max_new_tokens=40, do_sample=False, assistant_model=drafter, **hybrid)
    assert fast.tolist() == plain.tolist()
    assert "lookup" in drafter.last_generation_stats.rounds_by_source


def test_verification_reads_the_shared_kv_heads(monkeypatch):
    """transformers' sdpa copies a grouped-query target's keys and values for every query head (`repeat_kv`) when a
    mask comes with several query tokens, unless TRANSFORMERS_SDPA_FORCE_GQA=1, which verification sets for its
    forwards (`shared_kv_heads`). Fails if transformers stops honouring the switch; output unchanged either way."""
    import contextlib

    import transformers
    import transformers.integrations.sdpa_attention as sdpa
    from packaging.version import Version

    if Version(transformers.__version__) < Version("5.23"):
        pytest.skip("transformers < 5.23 has no TRANSFORMERS_SDPA_FORCE_GQA: verification copies the cache there")
    target = make_tiny_target(seed=2)  # 4 query heads, 2 key/value heads
    target.set_attn_implementation("sdpa")
    drafter = make_tiny_drafter(target)
    copies = []
    repeat_kv = sdpa.repeat_kv
    monkeypatch.setattr(sdpa, "repeat_kv", lambda states, n: copies.append(states.shape) or repeat_kv(states, n))
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    settings = dict(max_new_tokens=12, do_sample=False, draft_tree_size=6, draft_tree_depth=2, draft_tree_top_k=3)
    plain = target.generate(ids, max_new_tokens=12, do_sample=False)
    assert target.generate(ids, assistant_model=drafter, **settings).tolist() == plain.tolist()
    assert copies == []
    monkeypatch.setattr(decoding_slimspec, "shared_kv_heads", contextlib.nullcontext)  # without the switch
    assert target.generate(ids, assistant_model=drafter, **settings).tolist() == plain.tolist()
    assert copies  # the tree masks made transformers copy the cache


def test_a_one_token_verification_leaves_the_query_heads_to_transformers(monkeypatch):
    """A plain round (one token per row, as `draft_shape="auto"` probes and re-checks) runs without the shared-heads
    switch: transformers then folds a masked single query's heads onto the key/value heads, where PyTorch's CPU kernel
    with `enable_gqa` on one query token is several times slower; the drafter folds its one-query steps the same way.
    Wider rounds keep the switch."""
    import itertools

    import transformers.integrations.sdpa_attention as sdpa

    from slimspec_hf.shapes_slimspec import DraftShape, ShapeTuner

    shapes = itertools.cycle([DraftShape(), DraftShape(2, 2, 1)])  # plain and drafting rounds in turn
    monkeypatch.setattr(ShapeTuner, "next_shape", lambda self, rows=None, slots=None: next(shapes))
    monkeypatch.setattr(decoding_slimspec, "plain_is_chosen", lambda *args: False)  # the call runs the loop
    target = make_tiny_target(seed=2)  # 4 query heads, 2 key/value heads
    target.set_attn_implementation("sdpa")
    drafter = make_tiny_drafter(target)
    calls = []
    attention = sdpa.torch.nn.functional.scaled_dot_product_attention

    def watched(query, key, value, *args, **kwargs):
        calls.append((query.shape[1], query.shape[2], bool(kwargs.get("enable_gqa"))))
        return attention(query, key, value, *args, **kwargs)

    monkeypatch.setattr(sdpa.torch.nn.functional, "scaled_dot_product_attention", watched)
    ids = torch.tensor([[0, 3, 1, 4, 1, 5], [9, 2, 6, 5, 3, 5]])
    mask = torch.tensor([[0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])  # a padded batch: every round passes a mask
    settings = dict(max_new_tokens=12, do_sample=False, draft_shape="auto")
    plain = target.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False)
    calls.clear()
    fast = target.generate(ids, attention_mask=mask, assistant_model=drafter, **settings)
    assert fast.tolist() == plain.tolist()
    assert drafter.last_generation_stats.rounds_by_source.get("plain")
    assert (2, 2, False) in calls  # the plain rounds: 4 query heads folded onto the 2 key/value heads
    assert all(not gqa for heads, queries, gqa in calls if queries == 1)
    assert (4, 3, True) in calls  # a drafting round of 3 tokens a row: on the shared heads


@pytest.mark.parametrize("weight_first", [False, True])
def test_the_lm_head_over_several_rows_gives_each_rows_logits_by_either_kernel(monkeypatch, weight_first):
    import weakref

    from slimspec_hf import verification_slimspec

    torch.manual_seed(0)
    head = torch.nn.Linear(16, 300, bias=False)
    hidden = torch.randn(1, 5, 16)
    monkeypatch.setattr(verification_slimspec, "_WEIGHT_FIRST", {head: weight_first})
    rows = verification_slimspec.head_rows(head, hidden)
    assert rows.shape == (1, 5, 300)
    for i in range(5):  # each row as the target computes it alone
        torch.testing.assert_close(rows[:, i], head(hidden[:, i]), rtol=1e-5, atol=1e-5)
    fresh = torch.nn.Linear(16, 300, bias=False)
    monkeypatch.setattr(verification_slimspec, "_WEIGHT_FIRST", weakref.WeakKeyDictionary())
    verification_slimspec.head_rows(fresh, hidden)
    assert fresh in verification_slimspec._WEIGHT_FIRST  # timed once, on the first multi-row call


def test_the_lm_head_kernels_are_timed_at_prefill_not_in_a_timed_round(monkeypatch, tiny_target):
    """`draft_shape="auto"` times rounds to choose shapes: the LM head's one-off kernel timing runs before the first
    round starts, so that the first multi-row round is not measured dearer than it is."""
    import weakref

    from slimspec_hf import shapes_slimspec, verification_slimspec

    monkeypatch.setattr(verification_slimspec, "_WEIGHT_FIRST", weakref.WeakKeyDictionary())
    head = tiny_target.get_output_embeddings()
    timed_at_start = []
    start = shapes_slimspec.RoundTimer.start

    def watched(self, threshold, rows=None, slots=None):
        timed_at_start.append(head in verification_slimspec._WEIGHT_FIRST)
        return start(self, threshold, rows, slots)

    monkeypatch.setattr(shapes_slimspec.RoundTimer, "start", watched)
    drafter = make_tiny_drafter(tiny_target)
    ids = torch.tensor([[5, 9, 17, 3, 22, 8]])
    tiny_target.generate(ids, assistant_model=drafter, draft_shape="auto", max_new_tokens=6, do_sample=False)
    assert timed_at_start and all(timed_at_start)


def test_a_stopping_criterion_met_inside_a_round_ends_the_row_there():
    """A criterion (a stop string, a caller's own) met at a token inside a round's accepted tokens ends the row at
    that token, as plain decoding does: sequences, scores and the returned cache; one prompt and a padded batch."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    target = make_tiny_target()
    drafter = make_tiny_drafter(target)
    prompt = [5, 9, 17, 3, 22, 8, 5, 9, 17, 3, 22, 8, 5, 9]  # plain greedy: ... 122 116 11 122 116 11 122 116 11 ...

    class AfterPair(StoppingCriteria):  # met after "116 11" once 18 tokens are out: inside a lookup round
        def __call__(self, input_ids, scores, **kwargs):
            return (input_ids[:, -1] == 11) & (input_ids[:, -2] == 116) & (input_ids.shape[1] > len(prompt) + 18)

    settings = dict(assistant_model=drafter, draft_lookup=True, draft_lookup_min_ngram=1, num_assistant_tokens=4)
    common = dict(max_new_tokens=30, do_sample=False, stopping_criteria=StoppingCriteriaList([AfterPair()]))
    outputs = dict(return_dict_in_generate=True, output_scores=True)
    ids = torch.tensor([prompt])
    plain = target.generate(ids, **common, **outputs)
    fast = target.generate(ids, **common, **outputs, **settings)
    assert plain.sequences.shape[1] < len(prompt) + 30  # the criterion ended it
    assert torch.equal(fast.sequences, plain.sequences) and len(fast.scores) == len(plain.scores)
    assert fast.cache.get_seq_length() == plain.sequences.shape[1] - 1
    assert drafter.last_generation_stats.rounds_by_source.get("lookup", 0) > 0
    batch = torch.tensor([[0, 0, 7, 1, 7, 1, 7, 1, 7, 1, 7, 1, 7, 1], prompt])
    mask = (torch.arange(14) >= torch.tensor([[2], [0]])).long()
    padding = dict(attention_mask=mask, pad_token_id=0, eos_token_id=127)  # with an EOS, finished rows are padded
    plain = target.generate(batch, **padding, **common)
    assert (plain[1] == 0).sum() > 0  # the second row ended early
    assert torch.equal(target.generate(batch, **padding, **common, **settings), plain)
