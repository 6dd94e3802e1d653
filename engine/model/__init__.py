"""The network: Moondream 2's architecture (vision encoder, text decoder, region heads),
its configuration presets, image tiling, strict checkpoint and tokenizer loading, and the
blocking reference decoder that is the engine's correctness oracle."""
