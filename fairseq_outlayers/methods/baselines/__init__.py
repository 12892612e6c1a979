"""The baseline layers: fairseq's learned and tied softmax, and the standard embeddings."""
