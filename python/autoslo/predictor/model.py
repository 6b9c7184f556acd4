"""The Iconq+ network in PyTorch (the definition the Rust kernels mirror; see ``predictor/iconq.rs``).

``forward`` is the batched path used for training and evaluation; ``before_state``, ``after_step`` and
``head_log`` are the incremental step methods the Rust side calls through libtorch. All four are
exported in the TorchScript artifact.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class IconqPlus(nn.Module):
    """LSTM over interaction feature vectors: before-neighbours then the query, then after-neighbours.

    The after-LSTM starts from the before-LSTM's final state, so ingesting one more later neighbour
    is one step from cached state. The head predicts ln(latency) as ln(Stage estimate) + a correction.
    """

    def __init__(self, input_dim: int, embedding: int = 32, hidden: int = 64, head_hidden: int = 64) -> None:
        super().__init__()
        # Normalisation statistics are parameters (frozen) so libtorch lists them with the weights.
        self.mu = nn.Parameter(torch.zeros(input_dim), requires_grad=False)
        self.sigma = nn.Parameter(torch.ones(input_dim), requires_grad=False)
        self.emb = nn.Linear(input_dim, embedding)
        self.lstm_before = nn.LSTM(embedding, hidden, batch_first=True)
        self.lstm_after = nn.LSTM(embedding, hidden, batch_first=True)
        self.head1 = nn.Linear(2 * hidden, head_hidden)
        self.head2 = nn.Linear(head_hidden, 1)
        self.hidden = hidden

    def embed(self, x: Tensor) -> Tensor:
        return torch.relu(self.emb((x - self.mu) / self.sigma))

    def _head(self, hb: Tensor, ha: Tensor, ln_stage: Tensor) -> Tensor:
        return ln_stage + self.head2(torch.relu(self.head1(torch.cat([hb, ha], -1)))).squeeze(-1)

    def _masked_lstm(self, lstm: nn.LSTM, e: Tensor, lengths: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
        """Run `lstm` over padded e [B, T, E] from (h, c) [B, H], freezing each row after its length.

        The same arithmetic as nn.LSTM (gate order i, f, g, o), written out because PyTorch's packed
        LSTM backward is very slow on CPU; the input projection is one matmul for all steps.
        """
        # torch's stubs type a module's attributes as Tensor | Module (this method is TorchScript,
        # so no cast): nn.LSTM's parameters are tensors.
        gx = torch.matmul(e, lstm.weight_ih_l0.t()) + lstm.bias_ih_l0 + lstm.bias_hh_l0  # type: ignore[operator]
        w = lstm.weight_hh_l0.t()  # type: ignore[operator]
        # unbind, not gx[:, t]: indexing's backward would materialise a full-size gradient per step (O(T²)).
        steps = gx.unbind(1)
        masks = (lengths.unsqueeze(1) > torch.arange(e.shape[1]).unsqueeze(0)).unsqueeze(2).unbind(1)
        for t in range(len(steps)):
            g = steps[t] + torch.matmul(h, w)
            i, f, gg, o = g.chunk(4, 1)
            c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(gg)
            h_new = torch.sigmoid(o) * torch.tanh(c_new)
            h = torch.where(masks[t], h_new, h)
            c = torch.where(masks[t], c_new, c)
        return h, c

    def forward(self, xb: Tensor, lb: Tensor, xa: Tensor, la: Tensor, ln_stage: Tensor) -> Tensor:
        """xb [B, Tb, D] with lengths lb ≥ 1; xa [B, Ta, D] with lengths la ≥ 0; returns ln latency [B]."""
        zero = torch.zeros(xb.shape[0], self.hidden, dtype=xb.dtype)
        hb, cb = self._masked_lstm(self.lstm_before, self.embed(xb), lb, zero, zero)
        ha, _ = self._masked_lstm(self.lstm_after, self.embed(xa), la, hb, cb)
        return self._head(hb, ha, ln_stage)

    @torch.jit.export
    def before_state(self, xs: Tensor) -> Tensor:
        """Before-LSTM from zero state over xs [T, D]; returns [h; c] as [2, H]."""
        _, (h, c) = self.lstm_before(self.embed(xs).unsqueeze(0))
        return torch.cat([h.view(1, -1), c.view(1, -1)], 0)

    @torch.jit.export
    def after_step(self, x: Tensor, state: Tensor) -> Tensor:
        """One after-LSTM step on x [D] from state [2, H]; returns the new [2, H]."""
        e = self.embed(x.view(1, 1, -1))
        _, (h, c) = self.lstm_after(e, (state[0].view(1, 1, -1).contiguous(), state[1].view(1, 1, -1).contiguous()))
        return torch.cat([h.view(1, -1), c.view(1, -1)], 0)

    @torch.jit.export
    def head_log(self, hb: Tensor, ha: Tensor, ln_stage: Tensor) -> Tensor:
        """ln latency [1] from the before/after hidden states [H] and ln Stage estimate [1]."""
        return self._head(hb.view(1, -1), ha.view(1, -1), ln_stage.view(1))
