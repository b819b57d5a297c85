"""A small GPT-2-style language model written the way published single-file models are.

Test fixture for the PyTorch frontend (issue 24): token and position embeddings
(``torch.arange`` positions), pre-norm blocks with a fused query/key/value projection split
into heads, causal attention either written out (a registered lower-triangular buffer and
``masked_fill(mask == 0, -inf)``) or through ``F.scaled_dot_product_attention(is_causal=True)``,
a GELU MLP, layer norm with or without bias, dropout, and an output head that shares the
token embedding's weight. ``forward(idx, targets)`` returns ``(logits, loss)`` for all
positions; ``forward(idx)`` the logits of the last position only.
"""
import dataclasses
import math

import torch
from torch import nn
from torch.nn import functional as F


@dataclasses.dataclass
class Config:
    vocab: int = 64
    context: int = 16
    layers: int = 2
    heads: int = 4
    width: int = 32
    dropout: float = 0.0
    bias: bool = True
    fused_attention: bool = False      # F.scaled_dot_product_attention instead of the explicit mask
    tanh_gelu: bool = False
    mixed: bool = False                # odd layers: fused attention, tanh GELU, no biases (one model, all forms)

    def layer(self, i: int) -> "Config":
        if not self.mixed or i % 2 == 0:
            return self
        return dataclasses.replace(self, fused_attention=True, tanh_gelu=True, bias=False, mixed=False)


class Norm(nn.Module):
    """Layer norm whose bias can be switched off (``F.layer_norm`` with ``bias=None``)."""

    def __init__(self, width, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class SelfAttention(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        assert cfg.width % cfg.heads == 0
        self.c_attn = nn.Linear(cfg.width, 3 * cfg.width, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.width, cfg.width, bias=cfg.bias)
        self.attn_drop = nn.Dropout(cfg.dropout)
        self.resid_drop = nn.Dropout(cfg.dropout)
        self.heads, self.width, self.p = cfg.heads, cfg.width, cfg.dropout
        self.fused = cfg.fused_attention
        if not self.fused:
            causal = torch.tril(torch.ones(cfg.context, cfg.context))
            self.register_buffer("mask", causal.view(1, 1, cfg.context, cfg.context))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.width, dim=2)
        hd = C // self.heads
        q = q.view(B, T, self.heads, hd).transpose(1, 2)
        k = k.view(B, T, self.heads, hd).transpose(1, 2)
        v = v.view(B, T, self.heads, hd).transpose(1, 2)
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                               dropout_p=self.p if self.training else 0.0, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_drop(att)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.c_proj(y))


class FeedForward(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.c_fc = nn.Linear(cfg.width, 4 * cfg.width, bias=cfg.bias)
        self.act = nn.GELU(approximate="tanh" if cfg.tanh_gelu else "none")
        self.c_proj = nn.Linear(4 * cfg.width, cfg.width, bias=cfg.bias)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.drop(self.c_proj(self.act(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.ln_1 = Norm(cfg.width, cfg.bias)
        self.attn = SelfAttention(cfg)
        self.ln_2 = Norm(cfg.width, cfg.bias)
        self.mlp = FeedForward(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: Config, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.cfg = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab, cfg.width),
            wpe=nn.Embedding(cfg.context, cfg.width),
            drop=nn.Dropout(cfg.dropout),
            h=nn.ModuleList([Block(cfg.layer(i)) for i in range(cfg.layers)]),
            ln_f=Norm(cfg.width, cfg.bias),
        ))
        self.lm_head = nn.Linear(cfg.width, cfg.vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight          # tied input / output embedding
        self.apply(self._init)
        for name, p in self.named_parameters():                    # scaled init of residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.layers))

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.uniform_(m.bias, -0.02, 0.02)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        B, T = idx.size()
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
            return logits, loss
        return self.lm_head(x[:, [-1], :]).to(self.lm_head.weight.dtype)

    def optimizer(self, lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95)):
        """AdamW with two groups: matrices decay, vectors (biases, norms) do not."""
        params = {n: p for n, p in self.named_parameters() if p.requires_grad}
        decay = [p for p in params.values() if p.dim() >= 2]
        no_decay = [p for p in params.values() if p.dim() < 2]
        return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                  {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=betas)


def tiny(**kw) -> GPT:
    return GPT(Config(**kw))
