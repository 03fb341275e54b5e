# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Plain prompt formats for base models (no chat template), in one place: data regeneration, training and the
benchmarks all render prompts through these.

An instruction-tuned target (SmolLM2-135M-Instruct) renders conversations with its own chat template. A base model
(Gemma-3-270M) has none, so the embedded base targets carry `QUESTION_ANSWER_TEMPLATE` as theirs — the three formats
a base model continues naturally:

- **question** (chat, questions, math, instructions): `Question: <turn>\\nAnswer:`; the model's answer follows after a
  space, and a conversation's next turn starts on a new line. Generation stops at `STOP_STRINGS` (the model starting
  a question of its own).
- **continuation**: the text itself (`continuation_prompt`).
- **code**: a function signature and its docstring, which the model completes with the body (`code_prompt`).

The chat template makes every tool that renders conversations (`slimspec prepare-data`, the trainer's loss mask,
`slimspec bench`) work unchanged on a base model; `continuation_prompt` and `code_prompt` build raw prompts for
`generate()` directly.
"""

QUESTION_PREFIX = "Question: "
ANSWER_PREFIX = "Answer:"

# Each user turn as "Question: …\nAnswer:", each answer after a space, a conversation's turns separated by newlines; a
# system message, if any, opens the text. Append-only (each prefix of a conversation renders to a prefix of the whole),
# which is what the trainer's loss mask needs.
QUESTION_ANSWER_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ message['content'] | trim }}\n\n"
    "{% elif message['role'] == 'user' %}" + QUESTION_PREFIX + "{{ message['content'] | trim }}\n" + ANSWER_PREFIX + ""
    "{% elif message['role'] == 'assistant' %} {{ message['content'] | trim }}\n"
    "{% endif %}"
    "{% endfor %}"
)

# A base model answering in the question format goes on to ask itself the next question: the answer ends there.
STOP_STRINGS = ("\n" + QUESTION_PREFIX.rstrip(),)


def question_prompt(question: str) -> str:
    """`Question: <question>\\nAnswer:` (what the template renders for a one-turn conversation, without BOS)."""
    return f"{QUESTION_PREFIX}{question.strip()}\n{ANSWER_PREFIX}"


def continuation_prompt(text: str) -> str:
    """The text itself: a base model continues it."""
    return text


def code_prompt(signature: str, docstring: str) -> str:
    """A Python function's signature and docstring, indented as its body: the model writes the body.

    >>> print(code_prompt("def add(a, b):", "Return a + b."))
    def add(a, b):
        \"\"\"Return a + b.\"\"\"
    <BLANKLINE>
    """
    return f'{signature.rstrip()}\n    """{docstring.strip()}"""\n'


def cut_at_stop(text: str, stop_strings=STOP_STRINGS) -> tuple[str, bool]:
    """`text` up to the first stop string (excluded), and whether one was found."""
    cuts = [text.find(s) for s in stop_strings if s and s in text]
    if not cuts:
        return text, False
    return text[: min(cuts)], True


__all__ = [
    "QUESTION_ANSWER_TEMPLATE",
    "STOP_STRINGS",
    "question_prompt",
    "continuation_prompt",
    "code_prompt",
    "cut_at_stop",
]
