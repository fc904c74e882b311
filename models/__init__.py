"""Loading and running models from local files (ONNX Runtime, llama.cpp)."""
