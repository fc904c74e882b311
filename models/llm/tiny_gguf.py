"""A tiny random-weight llama-architecture GGUF, generated on the spot for tests and benchmarks.

No model can be downloaded where the tests run, yet the LLM path must be exercised with the real
llama.cpp. :func:`make_tiny_gguf` writes a complete, loadable model with the ``gguf`` package's
``GGUFWriter``: llama architecture (RMSNorm, RoPE, SwiGLU feed-forward, grouped-query attention),
a SentencePiece-style vocabulary of its own (control tokens, the 256 byte-fallback tokens, single
characters and a few hundred word pieces of route instructions) and seeded Gaussian weights. Its
text is gibberish, but loading, tokenising, prompting, grammar-constrained sampling, determinism at
temperature 0 and timeouts behave as with a real model.

Tensor names and metadata keys follow llama.cpp's GGUF conventions (``gguf.constants``); shapes are
given in numpy order (rows, cols), which GGUF stores reversed (``ne = [cols, rows]``).
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.llm.sidecar import write_llm_sidecar

_WORDS = (
    "the a an and then go to turn left right at past after before find look for stop near next of "
    "with by drive head toward until you see pass reach follow keep straight landmarks ordered "
    "tree red white blue green yellow gray black building car truck stop sign bench fountain gate "
    "tower bridge road path street park parking lot house church school store station barn fence "
    "wall statue horse lamp post sidewalk crosswalk corner square large small tall old big glass "
    "brick wooden metal stone water fire hydrant bus shelter mailbox pole sign traffic cone"
).split()
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@dataclass(frozen=True)
class TinyLlamaShape:
    """Hyper-parameters of the generated model (kept small; head size n_embd / n_head must be even)."""

    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    n_layer: int = 2
    n_ff: int = 128
    n_ctx_train: int = 2048

    def check(self) -> None:
        """Raise ValueError for shapes llama.cpp would abort on (odd head size, bad GQA ratio)."""
        if self.n_embd % self.n_head or (self.n_embd // self.n_head) % 2:
            raise ValueError(f"n_embd={self.n_embd} / n_head={self.n_head} must be an even integer "
                             "head size (RoPE rotates pairs)")
        if self.n_head % self.n_head_kv:
            raise ValueError(f"n_head={self.n_head} must be a multiple of n_head_kv={self.n_head_kv}")
        if min(self.n_layer, self.n_ff, self.n_ctx_train) < 1:
            raise ValueError("n_layer, n_ff and n_ctx_train must be positive")


def tiny_vocab() -> tuple[list[str], list[float], list[int]]:
    """The vocabulary: ``(tokens, scores, token_types)``; ids 0/1/2 are <unk>/<s>/</s>.

    Word pieces come with all their prefixes, so SentencePiece merging can build whole words.
    """
    import gguf

    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    pieces: list[str] = ["\u2581"] + [c for c in string.ascii_letters + string.digits + ".,'-:;!?()|<>"]
    for word in dict.fromkeys(_WORDS):
        w = "\u2581" + word
        pieces += [w[:k] for k in range(2, len(w) + 1)]
    pieces += [f"\u2581{d}." for d in range(1, 11)]
    seen = set(tokens)
    for p in pieces:
        if p not in seen:
            seen.add(p)
            tokens.append(p)
            types.append(gguf.TokenType.NORMAL)
    scores = [0.0] * 3 + [0.0] * 256 + [float(len(t)) for t in tokens[259:]]
    return tokens, scores, [int(t) for t in types]


def make_tiny_gguf(path: str | Path, *, seed: int = 0, shape: TinyLlamaShape | None = None,
                   chat_template: bool = True, sidecar: bool = False) -> Path:
    """Write a tiny random llama-architecture GGUF model file.

    Parameters
    ----------
    path : str or Path
        Output file (parent directories are created).
    seed : int
        Seed of the weights; the same seed gives a byte-identical file.
    shape : TinyLlamaShape, optional
        Hyper-parameters (default: 2 layers, n_embd 64, 4 heads, 2 KV heads; about 1 MB).
    chat_template : bool
        Also store a small Jinja chat template (``tokenizer.chat_template``).
    sidecar : bool
        Also write the JSON sidecar ``<path>.json`` (kind ``llm``, ``random_init`` true), as a
        provisioned models directory has it.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    ValueError
        For a shape llama.cpp cannot run (see :meth:`TinyLlamaShape.check`).
    ImportError
        If the ``gguf`` package (extra ``llm``) is not installed.
    """
    import gguf

    shape = shape or TinyLlamaShape()
    shape.check()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokens, scores, types = tiny_vocab()
    rng = np.random.default_rng(seed)
    head_dim = shape.n_embd // shape.n_head
    n_kv = head_dim * shape.n_head_kv

    def w(*dims: int, scale: float = 0.08) -> np.ndarray:
        return (rng.standard_normal(dims) * scale).astype(np.float32)

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("robot-app tiny random llama")
    writer.add_context_length(shape.n_ctx_train)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    if chat_template:
        writer.add_chat_template(CHAT_TEMPLATE)

    writer.add_tensor("token_embd.weight", w(len(tokens), shape.n_embd, scale=0.5))
    for i in range(shape.n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(shape.n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.attn_q.weight", w(shape.n_embd, shape.n_embd))
        writer.add_tensor(f"blk.{i}.attn_k.weight", w(n_kv, shape.n_embd))
        writer.add_tensor(f"blk.{i}.attn_v.weight", w(n_kv, shape.n_embd))
        writer.add_tensor(f"blk.{i}.attn_output.weight", w(shape.n_embd, shape.n_embd))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(shape.n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", w(shape.n_ff, shape.n_embd))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", w(shape.n_ff, shape.n_embd))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", w(shape.n_embd, shape.n_ff))
    writer.add_tensor("output_norm.weight", np.ones(shape.n_embd, dtype=np.float32))
    writer.add_tensor("output.weight", w(len(tokens), shape.n_embd, scale=0.5))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    if sidecar:
        write_llm_sidecar(path, weights="random-init", random_init=True)
    return path
