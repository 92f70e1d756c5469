"""The built-in three-domain corpus: code, math and chat, as (prompt, answer) records.

Domains differ in entropy the way the paper's do (math most predictable, chat least):
- code: functions from the Python standard library's own source; the prompt is the signature and docstring, the
  answer the body (benchmark ``stdlib``).
- math: generated arithmetic (``arith``) and word problems (``word``) with worked, step-by-step solutions.
- chat: English prose that ships with Python: docstrings answering "what does X do?" (``docstrings``) and chunks of
  the ``pydoc_data`` topics (``topics``).

Every record has a split (train / calib / eval) fixed by a hash of its *group* (the module for code and
docstrings, the topic for topics, the problem for math), so evaluation prompts never share a module or topic with
what the target and drafters were trained on. Everything is deterministic for a given seed and Python version.
"""

from __future__ import annotations

import ast
import hashlib
import json
import random
import re
import sysconfig
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from atomic_files import atomic_write_text
from simulator.errors import UserError

from .world import WorldSize

DOMAINS = ("math", "code", "chat")
SPLITS = ("train", "calib", "eval")
# Split shares by group hash: most for training, a held-out slice for STS calibration and one for evaluation.
_SPLIT_EDGES = (0.80, 0.90)


@dataclass(frozen=True)
class Record:
    domain: str
    benchmark: str
    group: str
    split: str
    prompt: str
    answer: str


def split_of(group: str, seed: int) -> str:
    h = int.from_bytes(hashlib.sha256(f"{seed}:{group}".encode()).digest()[:8], "big") / 2**64
    return "train" if h < _SPLIT_EDGES[0] else ("calib" if h < _SPLIT_EDGES[1] else "eval")


# ---------------------------------------------------------------------------------------------------- code / chat


def _stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.glob("*.py") if not p.name.startswith("_") and "test" not in p.name)


def _functions(path: Path) -> Iterator[tuple[str, str, str, str]]:
    """(qualified name, head = signature + docstring source, body source, docstring) of documented functions."""
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return
    lines = source.splitlines(keepends=True)
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef) or not ast.get_docstring(node) or len(node.body) < 2:
            continue
        doc_end = node.body[0].end_lineno  # the docstring statement's last line (1-based)
        indent = node.col_offset
        head = "".join(line[indent:] for line in lines[node.lineno - 1:doc_end])
        body = "".join(line[indent:] if line[:indent].isspace() else line.lstrip()
                       for line in lines[doc_end:node.end_lineno])
        yield f"{path.stem}.{node.name}", head, body, ast.get_docstring(node) or ""


def _clip(text: str, limit: int) -> str:
    """Cut at a line (or, failing that, word) boundary at most ``limit`` characters in."""
    if len(text) <= limit:
        return text
    cut = text.rfind("\n", 0, limit)
    if cut < limit // 2:
        cut = text.rfind(" ", 0, limit)
    return text[: max(cut, 1)]


def code_and_docstring_records(size: WorldSize, seed: int) -> tuple[list[Record], list[Record]]:
    code: list[Record] = []
    docs: list[Record] = []
    for path in _stdlib_files():
        for qualname, head, body, doc in _functions(path):
            split = split_of("module:" + path.stem, seed)
            body = _clip(body.rstrip() + "\n", size.max_answer_chars)
            if 40 <= len(body) and len(head) <= size.max_prompt_chars:
                code.append(Record("code", "stdlib", path.stem, split,
                                   f"Complete this function from the `{path.stem}` module:\n{head}", body))
            prose = re.sub(r"\s+", " ", doc).strip()
            if len(prose) >= 60:
                docs.append(Record("chat", "docstrings", path.stem, split, f"What does `{qualname}` do?",
                                   _clip(prose, size.max_answer_chars)))
    rng = random.Random(seed)
    rng.shuffle(code)
    rng.shuffle(docs)
    return code[: size.n_code], docs[: size.n_docstrings]


def topic_records(size: WorldSize, seed: int) -> list[Record]:
    from pydoc_data.topics import topics

    out = []
    for name in sorted(topics):
        text = re.sub(r"[ \t]+", " ", topics[name]).strip()
        paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if len(p.strip()) >= 80]
        for i, para in enumerate(paragraphs):
            para = re.sub(r"\s+", " ", para)
            out.append(Record("chat", "topics", name, split_of("topic:" + name, seed),
                              f"Explain the Python topic '{name}' (part {i + 1}).",
                              _clip(para, size.max_answer_chars)))
    random.Random(seed + 1).shuffle(out)
    return out[: size.n_topic_chunks]


# ---------------------------------------------------------------------------------------------------------- math

_NAMES = ["Ada", "Ben", "Chen", "Dana", "Eli", "Fatima", "Gus", "Hana", "Ivan", "Jia", "Kofi", "Lena", "Mo", "Nia"]
_ITEMS = ["apples", "books", "marbles", "stamps", "coins", "pencils", "cards", "shells", "stickers", "eggs"]
_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def _arith(rng: random.Random) -> tuple[str, str]:
    a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 12)
    op1, op2 = rng.choice("+-*"), rng.choice("+-*")
    if op2 == "*" and op1 != "*":  # precedence: b * c first
        inner = b * c
        total = _OPS[op1](a, inner)
        steps = f"First {b} * {c} = {inner}.\nThen {a} {op1} {inner} = {total}."
    else:
        inner = _OPS[op1](a, b)
        total = _OPS[op2](inner, c)
        steps = f"First {a} {op1} {b} = {inner}.\nThen {inner} {op2} {c} = {total}."
    return f"Compute {a} {op1} {b} {op2} {c}.", f"{steps}\nThe answer is {total}."


def _word(rng: random.Random) -> tuple[str, str]:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    kind = rng.randrange(4)
    if kind == 0:
        a, b, c = rng.randint(5, 60), rng.randint(2, 40), rng.randint(1, 5)
        s = a + b
        r = s - c
        q = f"{name} has {a} {item}. {name} buys {b} more and then gives away {c}. How many {item} does {name} have now?"
        sol = (f"{name} starts with {a} {item}.\nAfter buying {b} more: {a} + {b} = {s}.\n"
               f"After giving away {c}: {s} - {c} = {r}.\nThe answer is {r}.")
    elif kind == 1:
        boxes, per = rng.randint(2, 12), rng.randint(3, 15)
        t = boxes * per
        q = f"There are {boxes} boxes with {per} {item} in each box. How many {item} are there in total?"
        sol = f"Each box has {per} {item} and there are {boxes} boxes.\nSo {boxes} * {per} = {t}.\nThe answer is {t}."
    elif kind == 2:
        friends, per = rng.randint(2, 9), rng.randint(2, 12)
        t = friends * per
        q = f"{name} shares {t} {item} equally among {friends} friends. How many {item} does each friend get?"
        sol = f"{name} has {t} {item} for {friends} friends.\nSo {t} / {friends} = {per}.\nThe answer is {per}."
    else:
        price, qty, paid = rng.randint(2, 9), rng.randint(2, 9), 0
        cost = price * qty
        paid = cost + rng.randint(0, 20)
        change = paid - cost
        q = (f"{name} buys {qty} {item} at {price} dollars each and pays with {paid} dollars. "
             f"How much change does {name} get?")
        sol = (f"The {item} cost {qty} * {price} = {cost} dollars.\nThe change is {paid} - {cost} = {change} dollars.\n"
               f"The answer is {change}.")
    return q, sol


def math_records(size: WorldSize, seed: int) -> list[Record]:
    rng = random.Random(seed + 2)
    out = []
    for bench, n, make in (("arith", size.n_arith, _arith), ("word", size.n_word, _word)):
        seen = set()
        while len([r for r in out if r.benchmark == bench]) < n:
            q, a = make(rng)
            if q in seen:
                continue
            seen.add(q)
            out.append(Record("math", bench, q, split_of(f"{bench}:{q}", seed), q, a))
    return out


# ------------------------------------------------------------------------------------------------------ assembly


def build_corpus(size: WorldSize, seed: int) -> list[Record]:
    code, docs = code_and_docstring_records(size, seed)
    records = math_records(size, seed) + code + docs + topic_records(size, seed)
    for domain in DOMAINS:
        for split in SPLITS:
            if not any(r.domain == domain and r.split == split for r in records):
                raise RuntimeError(f"corpus: no {domain} records in split {split}; enlarge the world size")
    return records


def save_corpus(records: Iterable[Record], path: Path) -> None:
    atomic_write_text(path, "".join(json.dumps(asdict(r), ensure_ascii=False) + "\n" for r in records))


def load_corpus(path: Path) -> list[Record]:
    if not path.is_file():
        raise UserError(f"{path}: corpus not found; run `dspark build-tiny` first")
    return [Record(**json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line]


def select(records: Iterable[Record], split: str, domain: str | None = None) -> list[Record]:
    return [r for r in records if r.split == split and (domain is None or r.domain == domain)]
