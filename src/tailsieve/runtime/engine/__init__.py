"""The engine client: the one seam to an inference server (``pieces.PieceRunner``), its HTTP
implementation (vLLM and SGLang wire formats, streaming, retries, aborts, tokenize, served
models) and the one fault classifier.
"""
