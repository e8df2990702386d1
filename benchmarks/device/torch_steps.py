"""Measure single-GPU training steps on a lent GPU machine, with the PyTorch its image holds.

The device machines lent to this project carry PyTorch but no TensorFlow (a
TensorFlow GPU wheel is far over what a call may carry), so this measures the
configurations of the calibration and validation rows whose source ran
PyTorch (LambdaPT's ResNet-50 and BERT SQuAD figures: G33, G34, LPT1, LPT2)
with plain torchvision / transformers models on synthetic data, and
torchvision's VGG-16 and Inception-v3 channels-last (the zoo's other CNNs).  The numbers
judge the GPU kernel model on a GPU the TensorFlow sources lack; nothing is
fitted on them (only ../shared/reference/published-training-figures.md is).

Run on the device machine:  python3 benchmarks/device/torch_steps.py --out $OUT/torch_steps.json
Each configuration: warm-up steps, then the median of timed steps (CUDA
events around each step), peak memory from torch.cuda.max_memory_allocated.
"""

import argparse
import json
import platform
import re
import statistics
import time


def _torchvision(torch, batch, precision, channels_last, network, size):
    """A torchvision classifier (ResNet-50, VGG-16, Inception-v3 without its auxiliary head) on ``size`` x ``size``
    images, trained with SGD and momentum."""
    import torchvision

    kwargs = {"aux_logits": False, "init_weights": False} if network == "inception_v3" else {}
    model = getattr(torchvision.models, network)(weights=None, **kwargs).cuda()
    images = torch.randn(batch, 3, size, size, device="cuda")
    labels = torch.randint(0, 1000, (batch,), device="cuda")
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        images = images.contiguous(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    return model, optimizer, lambda: loss_fn(model(images), labels)


def _resnet50(torch, batch, precision, channels_last):
    return _torchvision(torch, batch, precision, channels_last, "resnet50", 224)


def _bert(torch, batch, precision, channels_last, size, seq):
    from transformers import BertConfig, BertForQuestionAnswering

    layers, hidden, heads = {"base": (12, 768, 12), "large": (24, 1024, 16)}[size]
    config = BertConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                        intermediate_size=4 * hidden)
    model = BertForQuestionAnswering(config).cuda()
    ids = torch.randint(0, config.vocab_size, (batch, seq), device="cuda")
    start = torch.randint(0, seq, (batch,), device="cuda")
    end = torch.randint(0, seq, (batch,), device="cuda")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    return model, optimizer, lambda: model(input_ids=ids, start_positions=start, end_positions=end).loss


def measure(torch, name, build, batch, precision, warmup=8, timed=20, **kw):
    """Median step seconds and peak bytes of one configuration."""
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.benchmark = True
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model, optimizer, loss_of = build(torch, batch, precision, **kw)
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    half = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=half or torch.float32, enabled=half is not None):
            loss = loss_of()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(timed):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        step()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) / 1e3)
    seconds = statistics.median(times)
    result = {"name": name, "batch": batch, "precision": precision, "step_s": seconds,
              "step_s_min": min(times), "step_s_max": max(times), "samples_per_s": batch / seconds,
              "peak_bytes": torch.cuda.max_memory_allocated(), "warmup": warmup, "timed": timed, **kw}
    del model, optimizer
    return result


CONFIGS = [
    # (name, builder, batch, precision, extra keywords): the rows' configurations
    ("resnet50 (LPT1 amp-h100)", _resnet50, 1280, "fp16", {"channels_last": False}),
    ("resnet50 channels_last", _resnet50, 1280, "fp16", {"channels_last": True}),
    ("resnet50 (LPT2 tf32-h100)", _resnet50, 640, "tf32", {"channels_last": False}),
    ("resnet50 tf32 channels_last", _resnet50, 640, "tf32", {"channels_last": True}),
    ("resnet50 fp32", _resnet50, 256, "fp32", {"channels_last": False}),
    ("resnet50 fp32 channels_last", _resnet50, 256, "fp32", {"channels_last": True}),
    ("vgg16 tf32", _torchvision, 128, "tf32", {"channels_last": False, "network": "vgg16", "size": 224}),
    ("vgg16 tf32 channels_last", _torchvision, 128, "tf32", {"channels_last": True, "network": "vgg16", "size": 224}),
    ("vgg16 amp channels_last", _torchvision, 128, "fp16", {"channels_last": True, "network": "vgg16", "size": 224}),
    ("inception_v3 tf32 channels_last", _torchvision, 128, "tf32",
     {"channels_last": True, "network": "inception_v3", "size": 299}),
    ("inception_v3 amp channels_last", _torchvision, 128, "fp16",
     {"channels_last": True, "network": "inception_v3", "size": 299}),
    ("bert_base s384 (G34 h100)", _bert, 320, "fp16", {"channels_last": False, "size": "base", "seq": 384}),
    ("bert_large s384 (G33 h100)", _bert, 112, "fp16", {"channels_last": False, "size": "large", "seq": 384}),
]


def main():
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", default="", help="run only the configurations whose name matches this regex")
    args = parser.parse_args()
    machine = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
               "cudnn": torch.backends.cudnn.version(), "python": platform.python_version(),
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    results = []
    for name, build, batch, precision, extra in CONFIGS:
        if not re.search(args.only, name):
            continue
        try:
            results.append(measure(torch, name, build, batch, precision, **extra))
        except Exception as exc:  # a configuration that fails is recorded, and the others still run
            results.append({"name": name, "batch": batch, "precision": precision, "error": repr(exc)[:300]})
            torch.cuda.empty_cache()
        with open(args.out, "w") as fh:
            json.dump({"machine": machine, "results": results}, fh, indent=1)
        row = results[-1]
        print(f"{name:32s} b={batch:5d} {precision:5s} "
              + (f"{row['samples_per_s']:9.1f}/s  {row['step_s'] * 1e3:8.1f} ms  {row['peak_bytes'] / 2**30:6.1f} GiB"
                 if "error" not in row else row["error"]), flush=True)


if __name__ == "__main__":
    main()
