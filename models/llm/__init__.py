"""Local LLM (llama.cpp via llama-cpp-python): one shared model for landmark extraction and LASP.

Public API::

    from models.llm import open_llm, LlmClient, LlmError, LlmTimeout, make_tiny_gguf
    with open_llm(path, n_ctx=2048, n_threads=1, n_gpu_layers=0, seed=0, in_process=False) as llm:
        text = llm.complete(prompt, grammar=gbnf, max_tokens=128, temperature=0.0, timeout_s=30.0)

Importing this package does not import llama_cpp or gguf (both come with the ``llm`` extra); they are
loaded when a model is opened or a tiny model is written.
"""

from models.llm.client import InProcessLlm, LlmClient, WorkerLlm, open_llm
from models.llm.errors import GrammarError, LlmError, LlmTimeout
from models.llm.grammar import LANDMARK_LIST_GBNF, landmark_list_grammar, validate_gbnf
from models.llm.landmarks import extract_landmarks_llm
from models.llm.prompts import landmark_messages, landmark_prompt, parse_numbered_list
from models.llm.tiny_gguf import make_tiny_gguf

__all__ = [
    "GrammarError", "InProcessLlm", "LANDMARK_LIST_GBNF", "LlmClient", "LlmError", "LlmTimeout",
    "WorkerLlm", "extract_landmarks_llm", "landmark_list_grammar", "landmark_messages",
    "landmark_prompt", "make_tiny_gguf", "open_llm", "parse_numbered_list", "validate_gbnf",
]
