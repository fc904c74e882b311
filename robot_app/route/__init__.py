"""LM-Nav's planning on a map file: instruction -> landmarks (LLM or rule parser) -> CLIP grounding ->
the walk search; shared by ``robot-app plan``, the mission executive, ``eval sim`` and the demo."""
