#!/usr/bin/env python3
"""Writes the gradient layouts of real models (parameter names and shapes, as torchvision and
Hugging Face name them) as JSON: resnet50.json, bert_base.json, gpt2_small.json."""
import json, math, os

def resnet50():
    t = [("conv1.weight", [64, 3, 7, 7]), ("bn1.weight", [64]), ("bn1.bias", [64])]
    inplanes = 64
    for li, (planes, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)], start=1):
        for b in range(blocks):
            p = f"layer{li}.{b}"
            t += [(f"{p}.conv1.weight", [planes, inplanes, 1, 1]), (f"{p}.bn1.weight", [planes]), (f"{p}.bn1.bias", [planes]),
                  (f"{p}.conv2.weight", [planes, planes, 3, 3]), (f"{p}.bn2.weight", [planes]), (f"{p}.bn2.bias", [planes]),
                  (f"{p}.conv3.weight", [planes * 4, planes, 1, 1]), (f"{p}.bn3.weight", [planes * 4]),
                  (f"{p}.bn3.bias", [planes * 4])]
            if b == 0:
                t += [(f"{p}.downsample.0.weight", [planes * 4, inplanes, 1, 1]),
                      (f"{p}.downsample.1.weight", [planes * 4]), (f"{p}.downsample.1.bias", [planes * 4])]
            inplanes = planes * 4
    t += [("fc.weight", [1000, 2048]), ("fc.bias", [1000])]
    return t

def bert_base():
    t = [("embeddings.word_embeddings.weight", [30522, 768]), ("embeddings.position_embeddings.weight", [512, 768]),
         ("embeddings.token_type_embeddings.weight", [2, 768]), ("embeddings.LayerNorm.weight", [768]),
         ("embeddings.LayerNorm.bias", [768])]
    for i in range(12):
        p = f"encoder.layer.{i}"
        for m in ("query", "key", "value"):
            t += [(f"{p}.attention.self.{m}.weight", [768, 768]), (f"{p}.attention.self.{m}.bias", [768])]
        t += [(f"{p}.attention.output.dense.weight", [768, 768]), (f"{p}.attention.output.dense.bias", [768]),
              (f"{p}.attention.output.LayerNorm.weight", [768]), (f"{p}.attention.output.LayerNorm.bias", [768]),
              (f"{p}.intermediate.dense.weight", [3072, 768]), (f"{p}.intermediate.dense.bias", [3072]),
              (f"{p}.output.dense.weight", [768, 3072]), (f"{p}.output.dense.bias", [768]),
              (f"{p}.output.LayerNorm.weight", [768]), (f"{p}.output.LayerNorm.bias", [768])]
    t += [("pooler.dense.weight", [768, 768]), ("pooler.dense.bias", [768])]
    return t

def gpt2_small():
    t = [("wte.weight", [50257, 768]), ("wpe.weight", [1024, 768])]
    for i in range(12):
        p = f"h.{i}"
        t += [(f"{p}.ln_1.weight", [768]), (f"{p}.ln_1.bias", [768]), (f"{p}.attn.c_attn.weight", [768, 2304]),
              (f"{p}.attn.c_attn.bias", [2304]), (f"{p}.attn.c_proj.weight", [768, 768]), (f"{p}.attn.c_proj.bias", [768]),
              (f"{p}.ln_2.weight", [768]), (f"{p}.ln_2.bias", [768]), (f"{p}.mlp.c_fc.weight", [768, 3072]),
              (f"{p}.mlp.c_fc.bias", [3072]), (f"{p}.mlp.c_proj.weight", [3072, 768]), (f"{p}.mlp.c_proj.bias", [768])]
    t += [("ln_f.weight", [768]), ("ln_f.bias", [768])]
    return t

here = os.path.dirname(os.path.abspath(__file__))
for name, f in (("resnet50", resnet50), ("bert_base", bert_base), ("gpt2_small", gpt2_small)):
    t = f()
    n = sum(math.prod(s) for _, s in t)
    with open(os.path.join(here, f"{name}.json"), "w") as out:
        json.dump({"model": name, "tensors": len(t), "parameters": n,
                   "layout": [{"name": a, "shape": s} for a, s in t]}, out, indent=0)
        out.write("\n")
    print(f"{name}: {len(t)} tensors, {n} parameters")
