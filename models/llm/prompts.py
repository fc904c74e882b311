"""The landmark-extraction prompt (LM-Nav App. A) and the parser of its numbered-list answer.

LM-Nav (Shah et al., CoRL 2022) App. A extracts landmarks with GPT-3 from a few-shot prompt: three
worked examples, each an instruction followed by its landmarks as a numbered list in visiting order,
then the new instruction and the list header for the model to continue, sampled at temperature 0. The
three examples below follow that structure; they are written for this product and show the cases the
paper's examples teach: a re-ordering ("after passing"), a "before it you will pass" clause and turns
and distances that are not landmarks.
"""

from __future__ import annotations

import re

_EXAMPLES = (
    ("Turn right next to an old red barn. Look for a water tower, which you will see after passing "
     "a feed store.", ("an old red barn", "a feed store", "a water tower")),
    ("Drive straight for three blocks. Turn left at a traffic circle; before it you will pass a "
     "tall, thin tree.", ("a tall, thin tree", "a traffic circle")),
    ("Find a bus stop after taking the first right next to a statue of a soldier.",
     ("a statue of a soldier", "a bus stop")),
)
HEADER = "Ordered landmarks:"
_ITEM = re.compile(r"^\s*(\d{1,2})\s*[.)]\s*(.*?)\s*$")
SYSTEM_MESSAGE = ("You turn a robot's route instruction into the ordered list of landmarks it must "
                  "visit. Answer only with a numbered list, one landmark per line.")


def _block(instruction: str, landmarks: tuple[str, ...] | None) -> str:
    text = f"{instruction.strip()}\n{HEADER}\n"
    if landmarks is not None:
        text += "".join(f"{i}. {lm}\n" for i, lm in enumerate(landmarks, 1))
    return text


def landmark_prompt(instruction: str) -> str:
    """Plain completion prompt: the three examples, then ``instruction`` and the list header.

    Raises
    ------
    ValueError
        If ``instruction`` is empty or only white space.
    """
    if not instruction or not instruction.strip():
        raise ValueError("instruction is empty")
    shots = "\n".join(_block(ins, lms) for ins, lms in _EXAMPLES)
    return f"{shots}\n{_block(instruction, None)}"


def landmark_messages(instruction: str) -> list[dict[str, str]]:
    """Chat variant for instruction-tuned models: the same three examples as user/assistant turns."""
    if not instruction or not instruction.strip():
        raise ValueError("instruction is empty")
    messages = [{"role": "system", "content": SYSTEM_MESSAGE}]
    for ins, lms in _EXAMPLES:
        messages.append({"role": "user", "content": ins})
        messages.append({"role": "assistant",
                         "content": "".join(f"{i}. {lm}\n" for i, lm in enumerate(lms, 1)).rstrip()})
    messages.append({"role": "user", "content": instruction.strip()})
    return messages


def parse_numbered_list(text: str) -> list[str]:
    """Items of a numbered list answer (``"1. a stop sign\\n2. a white car"``), in order.

    Lines that are not list items end the list once it has started (a model that keeps talking after
    the list). Items are stripped of surrounding white space and trailing punctuation.

    Returns
    -------
    list of str
        Possibly empty.
    """
    items: list[str] = []
    for line in text.splitlines():
        m = _ITEM.match(line)
        if m is None:
            if items and line.strip():
                break
            continue
        item = m.group(2).strip(" .;,")
        if item:
            items.append(item)
    return items
