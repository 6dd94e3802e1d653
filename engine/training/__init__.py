"""Training and evaluation of the embedded model: synthetic scenes, the offline tokenizer,
the training recipe and the held-out evaluation. Serving code never imports this package."""
