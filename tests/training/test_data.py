"""Prompt loading, resumable regeneration, chat-template loss masks (SmolLM2 template), collation."""

import json

import datasets
import pytest
import torch

from slimspec_hf.training.data import (
    SlimSpecDataCollator,
    completed_ids,
    load_prompts,
    load_training_dataset,
    prepare_dataset,
    regenerate,
    tokenize_conversation,
)


CONVERSATION = [
    {"role": "user", "content": "What is 2 + 2?"},
    {"role": "assistant", "content": "2 + 2 = 4."},
    {"role": "user", "content": "And times 3?"},
    {"role": "assistant", "content": "That makes 12."},
]


def test_load_prompts_turns_and_messages(tmp_path):
    path = tmp_path / "p.jsonl"
    rows = [
        {"id": "a", "source": "s", "turns": ["hello"]},
        {
            "id": "b",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "old answer, dropped"},
            ],
        },
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    prompts = load_prompts(path)
    assert prompts[0]["messages"] == [{"role": "user", "content": "hello"}]
    assert [m["role"] for m in prompts[1]["messages"]] == ["system", "user"]
    path.write_text(json.dumps({"id": "c", "text": "no turns"}) + "\n")
    with pytest.raises(ValueError, match="turns"):
        load_prompts(path)


def test_collator_pads_right_with_masks():
    batch = SlimSpecDataCollator(pad_token_id=9)(
        [{"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]}, {"input_ids": [4], "loss_mask": [1]}]
    )
    assert batch["input_ids"].tolist() == [[1, 2, 3], [4, 9, 9]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["loss_mask"].tolist() == [[0, 1, 1], [1, 0, 0]]
    assert len(set(batch["feature_key"])) == 2


def test_dataset_without_assistant_tokens_is_refused():
    rows = datasets.Dataset.from_list([{"input_ids": [1, 2, 3], "loss_mask": [0, 0, 0]}])
    with pytest.raises(ValueError, match="no assistant tokens"):
        prepare_dataset(rows)
    with pytest.raises(ValueError, match="loss_mask"):
        prepare_dataset(datasets.Dataset.from_list([{"input_ids": [1, 2]}]))
    with pytest.raises(ValueError, match="messages"):
        prepare_dataset(datasets.Dataset.from_list([{"text": "hi"}]))


@pytest.mark.integration
def test_loss_mask_from_the_smollm2_template(embedded_target):
    _, tokenizer = embedded_target
    assert "{% generation %}" not in tokenizer.chat_template  # so the mask comes from prefix rendering
    row = tokenize_conversation(tokenizer, CONVERSATION)
    ids, mask = row["input_ids"], row["loss_mask"]
    assert (
        ids
        == tokenizer(tokenizer.apply_chat_template(CONVERSATION, tokenize=False), add_special_tokens=False)[
            "input_ids"
        ]
    )
    # the masked tokens are exactly the two answers, each with the template's end-of-turn
    spans, current = [], []
    for token, m in zip(ids, mask):
        if m:
            current.append(token)
        elif current:
            spans.append(tokenizer.decode(current))
            current = []
    if current:
        spans.append(tokenizer.decode(current))
    assert spans == ["2 + 2 = 4.<|im_end|>\n", "That makes 12.<|im_end|>\n"]
    assert tokenize_conversation(tokenizer, CONVERSATION, max_length=10)["loss_mask"] == mask[:10]
    with pytest.raises(ValueError, match="no assistant tokens"):
        prepare_dataset(datasets.Dataset.from_list([{"messages": CONVERSATION[:1]}]), tokenizer)


@pytest.mark.integration
def test_regenerate_resumes_and_loses_at_most_a_batch(embedded_target, tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    _, tokenizer = embedded_target
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            eos_token_id=2,
            pad_token_id=2,
            bos_token_id=1,
        )
    ).eval()
    prompts = [{"id": f"p{i}", "messages": [{"role": "user", "content": f"Say {'hi ' * (i + 1)}"}]} for i in range(5)]
    stats = regenerate(model, tokenizer, prompts[:3], tmp_path, batch_size=2, max_new_tokens=3, progress=False)
    assert stats["done"] == 3 and stats["new_tokens"] > 0
    # a killed run: the last line of a shard is half-written
    shard = next((tmp_path / "data").glob("shard-*.jsonl"))
    with open(shard, "a") as f:
        f.write('{"id": "p3", "messages": [{"ro')
    assert completed_ids(tmp_path) == {"p0", "p1", "p2"}
    stats = regenerate(model, tokenizer, prompts, tmp_path, batch_size=2, max_new_tokens=3, progress=False)
    assert stats["skipped"] == 3 and stats["done"] == 2
    dataset = load_training_dataset(tmp_path)
    assert sorted(dataset["id"]) == [f"p{i}" for i in range(5)]
    for messages in dataset["messages"]:
        assert [m["role"] for m in messages] == ["user", "assistant"]
    tokenized = prepare_dataset(dataset, tokenizer, max_length=64)
    assert all(sum(m) > 0 for m in tokenized["loss_mask"])
    # a time box: the first batch always runs, then no batch begins that would end past `max_seconds`
    more = [{"id": f"q{i}", "messages": [{"role": "user", "content": f"Count to {i}"}]} for i in range(6)]
    stats = regenerate(
        model, tokenizer, more, tmp_path, batch_size=2, max_new_tokens=3, progress=False, max_seconds=1e-6
    )
    assert stats["done"] == 2 and stats["left"] == 4
    assert len(completed_ids(tmp_path)) == 7


def _write_shard(folder, rows, name="shard-000000000000001-1.jsonl"):
    (folder / "data").mkdir(parents=True, exist_ok=True)
    with open(folder / "data" / name, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def _row(id, answer):
    return {"id": id, "messages": [{"role": "user", "content": id}, {"role": "assistant", "content": answer}]}


def test_several_sources_load_as_one_with_each_id_once(tmp_path):
    # mix_16k holds the prompts of balanced_4k too, and a GPU run may answer prompts a CPU run answered meanwhile
    _write_shard(tmp_path / "mix", [_row("a", "mix"), _row("b", "mix")])
    _write_shard(tmp_path / "mix", [_row("b", "later shard")], name="shard-000000000000002-1.jsonl")
    _write_shard(tmp_path / "balanced", [_row("b", "balanced"), _row("c", "balanced")])
    extra = tmp_path / "extra.jsonl"
    extra.write_text(json.dumps(_row("d", "file")) + "\n")
    dataset = load_training_dataset(f"{tmp_path / 'mix'},{tmp_path / 'balanced'}, {extra}")
    assert dataset["id"] == ["a", "b", "c", "d"]
    assert [m[1]["content"] for m in dataset["messages"]] == ["mix", "mix", "balanced", "file"]
    with pytest.raises(ValueError, match="neither a prepare-data folder"):
        load_training_dataset(f"{tmp_path / 'mix'},{tmp_path / 'nothing'}")


def test_answer_turn_by_turn_batches_each_turn_and_keeps_system_messages(embedded_target):
    """Both prepare-data engines' turn loop: first turns together, then the second turns of the prompts that have
    them; a conversation is "length" if any of its answers was cut."""
    from slimspec_hf.training.data import answer_turn_by_turn

    _, tokenizer = embedded_target
    prompts = [
        {"id": "a", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]},
        {"id": "b", "messages": [{"role": "user", "content": "One"}, {"role": "user", "content": "Two"}]},
    ]
    calls = []

    def generate_turn(active, turn, texts):
        calls.append((list(active), turn))
        assert all(text.rstrip().endswith("assistant") for text in texts)  # rendered up to the assistant's turn
        return [(f"answer {i}.{turn}", "length" if (i, turn) == (1, 0) else "stop") for i in active]

    conversations, finish = answer_turn_by_turn(tokenizer, prompts, generate_turn)
    assert calls == [([0, 1], 0), ([1], 1)]
    assert [m["role"] for m in conversations[0]] == ["system", "user", "assistant"]
    assert [m["content"] for m in conversations[1]] == ["One", "answer 1.0", "Two", "answer 1.1"]
    assert finish == ["stop", "length"]


def test_an_answer_ends_at_eos_or_at_a_stop_string():
    """A base model's plain question format ends an answer where the model asks itself the next question: the text
    is cut before the stop string and the row counts as stopped, not cut at the token limit."""
    from slimspec_hf.training.data import _cut_at_eos

    from ..testing_utils import make_char_tokenizer

    tokenizer = make_char_tokenizer()  # (printable ASCII only: the stop string here has no newline)
    rows = [tokenizer.encode(text, add_special_tokens=False) for text in (" 4. Q: 3+3?", " four and", " 5. Q")]
    rows[2].append(tokenizer.eos_token_id)
    answers, tokens = _cut_at_eos(tokenizer, rows, {tokenizer.eos_token_id}, (" Q:",))
    assert answers == [(" 4.", "stop"), (" four and", "length"), (" 5. Q", "stop")]
    assert tokens == sum(len(r) for r in rows)
