"""A BERT-base-sized encoder (12 layers, d=768, 12 heads, seq 128) with a classification
head, built from Keras layers, trained with model.fit (AdamW) on synthetic tokens."""

from bert import train

if __name__ == "__main__":
    train("bert_base", 12, 768, 12, 3072, __doc__, batch_size=4)
