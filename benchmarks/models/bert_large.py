"""A BERT-large-sized encoder (24 layers, d=1024, 16 heads, seq 128) with a classification
head, built from Keras layers, trained with model.fit (AdamW) on synthetic tokens."""

from bert import train

if __name__ == "__main__":
    train("bert_large", 24, 1024, 16, 4096, __doc__, batch_size=2)
