"""Reference forward pass in numpy for mnemo's recurrent architectures: mamba2 and granitehybrid.

Reads a GGUF file with the `gguf` package (weights dequantized by gguf.quants, independently of
mnemo), runs one sequence of tokens in float64 and returns the logits of every position.

The Mamba-2 mixer is computed in its *dual* (attention-like) form, not as a recurrence: for one
sequence starting from the zero state, Dao & Gu 2024 ("Transformers are SSMs", the SSD
framework, eq. for the 1-semiseparable matrix M) give

    y_t = sum_{s <= t} (C_t . B_s) * exp(sum_{r = s+1..t} dt_r A) * dt_s * x_s  +  D * x_t

per head (B and C of the head's group), a T x T masked matrix product. mnemo's kernels run the
token-by-token recurrence with a carried state instead, so agreement checks the recurrence, its
state handling and the layouts against a different algorithm. The rest follows llama.cpp's mamba2
and granite-hybrid graphs: in-projection split z | xBC | dt, causal depthwise conv1d (width
d_conv, zero history) + bias + SiLU, softplus(dt + dt_bias), gated grouped RMSNorm
(rms_norm_group(y * silu(z)) * w), out-projection. Granite: embeddings, both residual branches and
logits scaled by embedding_scale / residual_scale / 1 / logit_scale, attention scores by
attention.scale, no RoPE unless rope.scaling.finetuned (then RoPE "norm"), SwiGLU feed-forward.

Usage: python mamba2.py MODEL.gguf TOKEN_ID... -> prints JSON {"logits": [[...], ...]}
"""
import json
import math
import sys

import numpy as np

import forward as fw  # tests/reference/forward.py: Weights, rms_norm, rope, silu


def softplus(v):
    return np.where(v > 20.0, v, np.log1p(np.exp(np.minimum(v, 20.0))))


def ssm_hparams(w):
    d_conv = w.num("ssm.conv_kernel")
    d_inner = w.num("ssm.inner_size")
    d_state = w.num("ssm.state_size")
    n_head = w.num("ssm.time_step_rank")
    n_group = w.num("ssm.group_count")
    return d_conv, d_inner, d_state, n_head, n_group


def mamba2_mixer(w, p, h, eps):
    """h: [T, n_embd] normed input of block prefix p -> [T, n_embd]."""
    d_conv, d_inner, N, H, G = ssm_hparams(w)
    T = h.shape[0]
    P = d_inner // H
    zxbcdt = h @ w.get(p + "ssm_in.weight").T
    z = zxbcdt[:, :d_inner]
    xbc = zxbcdt[:, d_inner:2 * d_inner + 2 * G * N]
    dt = zxbcdt[:, 2 * d_inner + 2 * G * N:]
    # Causal depthwise conv with zero history: out[t, c] = sum_k W[c, k] * in[t - (d_conv-1) + k].
    conv_w = w.get(p + "ssm_conv1d.weight")  # [channels, d_conv]
    padded = np.vstack([np.zeros((d_conv - 1, xbc.shape[1])), xbc])
    conv = np.zeros_like(xbc)
    for k in range(d_conv):
        conv += padded[k:k + T, :] * conv_w[:, k][None, :]
    if w.has(p + "ssm_conv1d.bias"):
        conv += w.get(p + "ssm_conv1d.bias")
    xbc = fw.silu(conv)
    x = xbc[:, :d_inner].reshape(T, H, P)
    B = xbc[:, d_inner:d_inner + G * N].reshape(T, G, N)
    C = xbc[:, d_inner + G * N:].reshape(T, G, N)
    dt = softplus(dt + w.get(p + "ssm_dt.bias"))  # [T, H]
    A = w.get(p + "ssm_a").reshape(H)
    D = w.get(p + "ssm_d").reshape(H)
    y = np.zeros((T, H, P))
    causal = np.tril(np.ones((T, T), dtype=bool))
    for hd in range(H):
        g = hd // (H // G)
        cum = np.cumsum(dt[:, hd] * A[hd])  # cum[t] = sum_{r <= t} dt_r A
        seg = cum[:, None] - cum[None, :]  # sum_{r = s+1..t} for t >= s
        L = np.where(causal, np.exp(np.where(causal, seg, 0.0)), 0.0)
        M = (C[:, g, :] @ B[:, g, :].T) * L  # [T, T]
        y[:, hd, :] = M @ (dt[:, hd:hd + 1] * x[:, hd, :]) + D[hd] * x[:, hd, :]
    y = y.reshape(T, d_inner) * fw.silu(z)
    norm_w = w.get(p + "ssm_norm.weight").reshape(G, d_inner // G)
    y = fw.rms_norm(y.reshape(T, G, d_inner // G), norm_w, eps).reshape(T, d_inner)
    return y @ w.get(p + "ssm_out.weight").T


def granite_attention(w, p, h, n_head_kv, use_rope):
    n_embd = w.num("embedding_length")
    n_head = w.num("attention.head_count")
    hd = w.num("attention.key_length", n_embd // n_head)
    scale = w.num("attention.scale", 0.0) or 1.0 / math.sqrt(hd)
    T = h.shape[0]
    q = (h @ w.get(p + "attn_q.weight").T).reshape(T, n_head, hd)
    k = (h @ w.get(p + "attn_k.weight").T).reshape(T, n_head_kv, hd)
    v = (h @ w.get(p + "attn_v.weight").T).reshape(T, n_head_kv, hd)
    if use_rope:
        base = w.num("rope.freq_base", 10000.0)
        rope_dim = w.num("rope.dimension_count", hd)
        q = fw.rope(q, np.arange(T), base, rope_dim, neox=False)
        k = fw.rope(k, np.arange(T), base, rope_dim, neox=False)
    out = np.zeros((T, n_head, hd))
    mask = np.tril(np.ones((T, T), dtype=bool))
    group = n_head // n_head_kv
    for hq in range(n_head):
        s = (q[:, hq, :] @ k[:, hq // group, :].T) * scale
        s = np.where(mask, s, -np.inf)
        s = np.exp(s - s.max(axis=1, keepdims=True))
        s /= s.sum(axis=1, keepdims=True)
        out[:, hq, :] = s @ v[:, hq // group, :]
    o = out.reshape(T, n_head * hd) @ w.get(p + "attn_output.weight").T
    if w.has(p + "attn_output.bias"):
        o = o + w.get(p + "attn_output.bias")
    return o


def head_count_kv(w, n_layer):
    f = w.fields[f"{w.arch}.attention.head_count_kv"]
    vals = [f.parts[i][0].item() for i in f.data]
    return vals if len(vals) == n_layer else vals * n_layer


def forward(path, tokens):
    w = fw.Weights(path)
    granite = w.arch == "granitehybrid"
    assert w.arch in ("mamba2", "granitehybrid"), w.arch
    n_layer = w.num("block_count")
    eps = w.num("attention.layer_norm_rms_epsilon", 1e-5)
    x = w.get("token_embd.weight")[tokens]
    if granite:
        x = x * (w.num("embedding_scale", 0.0) or 1.0)
        res = w.num("residual_scale", 0.0) or 1.0
        kv = head_count_kv(w, n_layer)
        f = w.fields.get(f"{w.arch}.rope.scaling.finetuned")
        use_rope = True if f is None else bool(f.parts[f.data[0]][0])
    for il in range(n_layer):
        p = f"blk.{il}."
        h = fw.rms_norm(x, w.get(p + "attn_norm.weight"), eps)
        if granite and kv[il] > 0:
            o = granite_attention(w, p, h, kv[il], use_rope)
        else:
            o = mamba2_mixer(w, p, h, eps)
        if not granite:
            x = x + o
            continue
        x = x + res * o
        h = fw.rms_norm(x, w.get(p + "ffn_norm.weight"), eps)
        g = h @ w.get(p + "ffn_gate.weight").T
        u = h @ w.get(p + "ffn_up.weight").T
        x = x + res * ((fw.silu(g) * u) @ w.get(p + "ffn_down.weight").T)
    x = fw.rms_norm(x, w.get("output_norm.weight"), eps)
    out_w = w.get("output.weight") if w.has("output.weight") else w.get("token_embd.weight")
    logits = x @ out_w.T
    if granite:
        logits = logits / (w.num("logit_scale", 0.0) or 1.0)
    return logits


def main(argv):
    path, tokens = argv[0], [int(t) for t in argv[1:]]
    json.dump({"logits": forward(path, tokens).tolist()}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
