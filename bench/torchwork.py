# SPDX-License-Identifier: LGPL-2.1-or-later
# torchwork.py - small PyTorch CPU workloads whose tensor allocations bench/torchtrace.so records as the traces bench/torch-*.trace.gz.
"""Runs one small PyTorch workload on the CPU, for bench/torchtrace.so.

    TORCHTRACE_FILE=bench/torch-KIND.trace \\
    LD_PRELOAD=bench/.libs/torchtrace.so /usr/bin/python3 bench/torchwork.py KIND

KIND is one of:

  resnet   training steps of a small ResNet (basic blocks, 16-32-64
           channels) on batches of 16 32x32 images, SGD with momentum;
  decode   a GPT-style decoder (d=128, 4 layers) answering requests token by
           token with a growing key/value cache (each token, each layer's
           keys and values concatenated into a new, larger tensor);
  unet     a UNet-like denoiser (two levels, skip connections, a time
           embedding) run for 25 steps on a 4x32x32 latent, twice;
  switch   two models (a transformer encoder, a convolutional classifier)
           built, run for a few batches and dropped, in turn;
  llm      decode's loop at the scale of a small LLM (d=1024, 8 layers,
           a 32,000-token vocabulary: 0.6 GB of weights), three requests
           with prompts of 64 to 256 tokens: the large, growing key/value
           caches whose fragmentation expandable segments are for.

Where the shim is loaded, the script marks its steps in the trace ("# step
N", "# warmup-end": devcache-trace(5)) through the shim's torchtrace_mark();
without it, it runs all the same.  The seed is fixed, the sizes are small
and the intra-op threads are left as torch sets them.
"""

import ctypes
import sys

import torch
from torch import nn
import torch.nn.functional as F

try:
    _mark = ctypes.CDLL(None).torchtrace_mark
    _mark.argtypes = [ctypes.c_char_p]
except (AttributeError, OSError):
    _mark = None


def mark(text):
    if _mark:
        _mark(text.encode())


# ---- resnet ------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                       nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (self.short(x) if self.short is not None else x))


def resnet():
    net = nn.Sequential(
        nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        Block(16, 16, 1), Block(16, 16, 1), Block(16, 32, 2), Block(32, 32, 1),
        Block(32, 64, 2), Block(64, 64, 1),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    for step in range(12):
        mark("step %d batch 16" % step)
        x = torch.randn(16, 3, 32, 32)
        y = torch.randint(0, 10, (16,))
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step == 0:
            mark("warmup-end")


# ---- decode ------------------------------------------------------------------

class DecoderLayer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x, cache):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        if cache is not None:
            # Hugging Face's cache: a new, larger tensor every token.
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        att = (q @ k.transpose(-2, -1)) / (d // h) ** 0.5
        if t > 1:
            mask = torch.ones(t, k.shape[2], dtype=torch.bool).tril(k.shape[2] - t)
            att = att.masked_fill(~mask, float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x, (k, v)


def decode(d=128, heads=4, n_layers=4, vocab=1000, requests=5, prompts=(8, 48),
           news=(24, 80)):
    emb = nn.Embedding(vocab, d)
    pos = nn.Embedding(512, d)
    layers = nn.ModuleList(DecoderLayer(d, heads) for _ in range(n_layers))
    head = nn.Linear(d, vocab, bias=False)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for req in range(requests):
            batch = int(torch.randint(1, 4, (1,), generator=g))
            prompt = int(torch.randint(*prompts, (1,), generator=g))
            new = int(torch.randint(*news, (1,), generator=g))
            mark("step %d batch %d prompt %d new %d" % (req, batch, prompt, new))
            tokens = torch.randint(0, vocab, (batch, prompt), generator=g)
            caches = [None] * len(layers)
            x = tokens
            start = 0
            for _ in range(new):
                t = x.shape[1]
                hdn = emb(x) + pos(torch.arange(start, start + t))
                for i, layer in enumerate(layers):
                    hdn, caches[i] = layer(hdn, caches[i])
                logits = head(hdn[:, -1])
                x = logits.argmax(-1, keepdim=True)
                start += t
            del caches, hdn, logits
            if req == 0:
                mark("warmup-end")


def llm():
    decode(d=1024, heads=16, n_layers=8, vocab=32000, requests=3, prompts=(64, 256),
           news=(16, 48))


# ---- unet --------------------------------------------------------------------

def conv_block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, 1, 1), nn.GroupNorm(8, cout), nn.SiLU(),
                         nn.Conv2d(cout, cout, 3, 1, 1), nn.GroupNorm(8, cout), nn.SiLU())


class UNet(nn.Module):
    def __init__(self, c=4, base=32):
        super().__init__()
        self.temb = nn.Sequential(nn.Linear(64, 4 * base), nn.SiLU(), nn.Linear(4 * base, base))
        self.inp = nn.Conv2d(c, base, 3, 1, 1)
        self.d1 = conv_block(base, base)
        self.d2 = conv_block(base, 2 * base)
        self.mid = conv_block(2 * base, 2 * base)
        self.u2 = conv_block(4 * base, base)
        self.u1 = conv_block(2 * base, base)
        self.out = nn.Conv2d(base, c, 3, 1, 1)

    def forward(self, x, t):
        half = 32
        f = torch.exp(-torch.arange(half) * (9.21 / half)) * t
        e = self.temb(torch.cat([f.sin(), f.cos()]).unsqueeze(0))
        h1 = self.d1(self.inp(x) + e[:, :, None, None])
        h2 = self.d2(F.avg_pool2d(h1, 2))
        m = self.mid(F.avg_pool2d(h2, 2))
        u = self.u2(torch.cat([F.interpolate(m, scale_factor=2.0), h2], 1))
        u = self.u1(torch.cat([F.interpolate(u, scale_factor=2.0), h1], 1))
        return self.out(u)


def unet():
    net = UNet()
    steps = 25
    with torch.no_grad():
        for image in range(2):
            x = torch.randn(1, 4, 32, 32)
            for s in range(steps):
                mark("step %d image %d" % (image * steps + s, image))
                eps = net(x, float(steps - s))
                x = x - eps / steps
            if image == 0:
                mark("warmup-end")


# ---- switch ------------------------------------------------------------------

def model_a():
    return nn.TransformerEncoder(nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True), 3)


def model_b():
    return nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1), nn.ReLU(), nn.Conv2d(64, 128, 3, 2, 1),
                         nn.ReLU(), nn.Conv2d(128, 256, 3, 2, 1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 1000))


def switch():
    with torch.no_grad():
        for turn in range(6):
            mark("step %d model %s" % (turn, "ab"[turn % 2]))
            if turn % 2 == 0:
                net = model_a().eval()
                for _ in range(3):
                    net(torch.randn(2, 64, 256))
            else:
                net = model_b().eval()
                for _ in range(3):
                    net(torch.randn(4, 3, 64, 64))
            del net
            if turn == 1:
                mark("warmup-end")


WORKLOADS = {"resnet": resnet, "decode": decode, "unet": unet, "switch": switch, "llm": llm}


def main(argv):
    if len(argv) != 2 or argv[1] not in WORKLOADS:
        sys.stderr.write("usage: torchwork.py %s\n" % "|".join(WORKLOADS))
        return 2
    torch.manual_seed(0)
    WORKLOADS[argv[1]]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
