"""Building the topological map: recording drives (traversal logs), importing RECON drives, building the
map from a log (nodes, edges, node images, CLIP embeddings) and the synthetic logs tests and benchmarks use."""
