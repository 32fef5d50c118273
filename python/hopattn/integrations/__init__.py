# Integrations of hopattn with other libraries, one module each, imported on demand:
#   hopattn.integrations.transformers  Hugging Face Transformers (attn_implementation="hopattn")
# Importing this package imports nothing else (no torch, no transformers).
