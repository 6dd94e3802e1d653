"""The device worker: the runner (device buffers, CUDA graphs, launch / finalize), the sampler
(logits, grammar masks, greedy tokens, region values, the next forward's inputs), the decode
slots of in-flight steps, the compute and copy streams, and the pure pipeline state machine
that orders launch → finalize → commit."""
