"""Building blocks shared by the baselines and MS-VAE (paper Sec. 2.2, 3.2; App. D).

The baseline follower, the baseline speaker and MS-VAE are all assembled from the same five modules
(observation encoder, trajectory encoder, instruction encoder, action decoder, instruction decoder).
MS-VAE adds :class:`BottleneckAttention` and a :class:`LatentPrior`, as the paper says: "the bottleneck
attention can be attached to the baseline follower".

Data flow (B trajectories of up to T frames, instructions of up to L tokens)::

    observations[B,T,7,7,3] --mask--> real frames[N,7,7,3] --ObservationEncoder--> f[N,H] --scatter--> f[B,T,H]
    f, actions --TrajectoryEncoder (GRU)--> h_tau[B,T,H]            (speaker encoder, q(z|a,o))
    input_ids  --InstructionEncoder (BiGRU)--> h_y[B,L,H], s_y[B,H] (follower encoder, q(z|y))
    h --BottleneckAttention (K learned queries)--> mu, logvar [B,K,D] (Sec. 3.2)
    f, previous actions --ActionDecoder.LSTM--> h'[B,T,H];  c_t = f_att(h'_t, memory);  a_t = f_act(c_t, h'_t)
    memory --InstructionDecoder (2-layer transformer, cross-attention)--> p(y_l | memory, y_<l)

The LSTM state h'_t does not depend on the memory, so the action decoder runs over whole sequences in
parallel in training and one LSTM pass is shared by every memory (h_y, z ~ q(z|y), z ~ q(z|a,o)).

This file is the architecture. How it runs is its backend's (:mod:`msvae_hf.backends.registry`): each layer that
attends, runs a recurrence or a product asks ``self.backend``, which the model sets on every such layer
(``model.set_backend``; the same values at real positions under every backend). Where a model gathered a batch to
its real positions, a layer gets the backend's layout of them and only hands it to the backend's attention
(``attend_from``, ``attend_over``), which runs per group of rows of similar length on the CPU and over the padded
batch elsewhere.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..backends.registry import BACKENDS, Backend, Layout, Linear
from .frames import FRONT_CELLS

MAX_CELL_TABLE = 1 << 16
"""The most cell values (obs_num_values ** channels) the observation encoder embeds from one table."""


def _modulate(maps: torch.Tensor, film: torch.Tensor | None, norm: nn.Module | None) -> torch.Tensor:
    """FiLM on a map [N, C, h, w]: norm(maps * (1 + gamma) + beta) for ``film`` = (gamma, beta) [N, 2C]; the map
    itself where ``film`` is None."""
    if film is None:
        return maps
    gamma, beta = film.unsqueeze(-1).unsqueeze(-1).chunk(2, dim=1)
    return norm(maps * (1 + gamma) + beta)


class ObservationEncoder(nn.Module):
    """BabyAI symbolic observation (7x7x3 integers) -> feature vector.

    Each cell's three values (object, colour, state) are embedded and summed, as BabyAI 1.1's
    bag-of-words image embedding, then two 3x3 convolutions, a 2x2 max-pool and a linear layer. The
    agent's direction is embedded and added. Runs on real frames only (callers pass ``obs[mask]``).
    """

    backend: Backend = BACKENDS["default"]

    def __init__(self, config, film: bool = False) -> None:
        super().__init__()
        height, width, channels = config.obs_shape
        self.num_values = config.obs_num_values
        self.obs_shape = tuple(config.obs_shape)
        self.cell_embedding = nn.Embedding(channels * config.obs_num_values, config.obs_embed_dim)
        self.cell_table = config.obs_num_values**channels <= MAX_CELL_TABLE
        # The second ReLU after the max-pool: the same values and gradients as before it (ReLU is monotone, its
        # gradient at 0 is 0), on a map a fifth the size.
        self.conv = nn.Sequential(
            nn.Conv2d(config.obs_embed_dim, config.obs_channels, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(config.obs_channels, config.obs_channels, 3, padding=1),
            nn.MaxPool2d(2),
            nn.ReLU(),
        )
        pooled = (height // 2) * (width // 2) * config.obs_channels
        # FiLM's map is normalised after the modulation, per frame (BabyAI 1.1 puts a batch norm there): without it
        # the FiLMed features grow until the memory LSTM saturates and the gradients vanish.
        # ``film``: this encoder feeds a follower whose instruction FiLMs its maps (a speaker's reads no instruction):
        # the second convolution's map, and with ``film_layers`` = 2 the first's too (``first_film_norm``), the
        # trunk then ending at the first convolution.
        self.film_norm = nn.GroupNorm(1, config.obs_channels) if film else None
        two = film and config.film_layers == 2
        self.first_film_norm = nn.GroupNorm(1, config.obs_channels) if two else None
        self.trunk_layers = 1 if two else 3
        self.proj = Linear(pooled, config.hidden_size)
        self.num_directions = config.num_directions
        self.direction_embedding = nn.Embedding(config.num_directions, config.hidden_size)

    def forward(
        self, observations: torch.Tensor, directions: torch.Tensor, film: torch.Tensor | None = None
    ) -> torch.Tensor:
        """observations: integer [N, 7, 7, 3]; directions: [N]; film: [N, 2CL] or None -> features [N, H]."""
        return self.head(self.trunk(observations), directions, film)

    def trunk(self, observations: torch.Tensor) -> torch.Tensor:
        """The part that reads no instruction: the cell embeddings and the convolutions before the first FiLM (both,
        or the first where ``film_layers`` = 2), [N, 7, 7, 3] -> the map [N, C, h, w] (before the pooling),
        computed once per frame whatever memory modulates it."""
        if tuple(observations.shape[1:]) != self.obs_shape:
            raise ValueError(
                f"observations must have shape [N, {', '.join(map(str, self.obs_shape))}] per frame, "
                f"got {list(observations.shape)}"
            )
        obs = observations.long()
        if self.backend.checks_values and obs.numel() and (obs.min() < 0 or obs.max() >= self.num_values):
            raise ValueError(
                f"observation values must be in [0, obs_num_values={self.num_values}), "
                f"got range [{int(obs.min())}, {int(obs.max())}]"
            )
        return self.conv[:self.trunk_layers](self.embed_cells(obs).permute(0, 3, 1, 2))

    def head(self, maps: torch.Tensor, directions: torch.Tensor, film: torch.Tensor | None = None) -> torch.Tensor:
        """The trunk's map [N, C, h, w] -> features [N, H]: FiLM (Perez et al. 2018, as BabyAI 1.1 conditions
        perception on its instruction) where ``film`` [N, 2CL] (L = film_layers) holds each frame's (gamma, beta)
        for each modulated map, norm(x * (1 + gamma) + beta) with the norm over each frame's map (where L = 2, the
        first map's, then the ReLU and the second convolution, then the second's); then the max-pool, the ReLU,
        the linear layer and the agent's direction. Without ``film``, the maps go unmodulated."""
        if (self.backend.checks_values and directions.numel()
                and (directions.min() < 0 or directions.max() >= self.num_directions)):
            raise ValueError(f"directions must be in [0, num_directions={self.num_directions}), got range "
                             f"[{int(directions.min())}, {int(directions.max())}]")
        if self.trunk_layers == 1:
            first, film = (None, None) if film is None else film.chunk(2, dim=1)
            maps = self.conv[1:3](_modulate(maps, first, self.first_film_norm))
        maps = _modulate(maps, film, self.film_norm)
        x = self.conv[3:](maps).permute(0, 2, 3, 1)  # [N, h, w, C], as it lies in memory
        # proj reads the pooled map in (C, h, w) order; its columns are reordered rather than the map, which
        # would cost a copy of the map and one of its gradient.
        weight = self.proj.weight.unflatten(1, (x.shape[3], x.shape[1], x.shape[2])).permute(0, 2, 3, 1)
        features = self.backend.linear(x.flatten(1), weight.flatten(1), self.proj.bias)
        return F.relu(features + self.direction_embedding(directions.long()))

    def embed_cells(self, obs: torch.Tensor) -> torch.Tensor:
        """[N, H, W, channels] values -> [N, H, W, E]: the sum of each cell's value embeddings (:func:`embed_cells`)."""
        return embed_cells(self.cell_embedding, obs, self.num_values, self.cell_table)


def embed_cells(embedding: nn.Embedding, obs: torch.Tensor, num_values: int, table: bool = True) -> torch.Tensor:
    """[..., channels] cell values -> [..., E]: the sum of each cell's value embeddings (BabyAI 1.1's bag of words),
    channel c's value v at row ``c * num_values + v`` of ``embedding``.

    With ``table`` the sums are looked up in a table of every cell's sum (num_values ** channels rows), built from
    the embedding each time: the same values as summing per cell, and a backward over one index per cell instead
    of one per value, with no [..., channels, E] tensor in between.
    """
    channels = obs.shape[-1]
    if not table:
        offsets = torch.arange(channels, device=obs.device) * num_values
        return embedding(obs + offsets).sum(dim=-2)
    values = embedding.weight.view(channels, num_values, -1)
    cells, rows = values[0], obs[..., 0]  # a cell's row: its values as one number in base num_values
    for channel in range(1, channels):
        cells = (cells.unsqueeze(1) + values[channel]).flatten(0, 1)
        rows = rows * num_values + obs[..., channel]
    # index_select's backward adds each cell's gradient into its row (index_add); embedding's sorts the
    # indices first. The same values and gradients, in about two thirds of the time.
    return cells.index_select(0, rows.reshape(-1)).view(*rows.shape, cells.shape[-1])


class FrontCells(nn.Module):
    """Frames [B, T, 7, 7, 3] -> [B, T, H]: the value embeddings of the :data:`FRONT_CELLS`, concatenated and
    projected, which the trajectory encoder adds to each frame's features (``trajectory_front_cells``). The
    convolutions pool the cell ahead with its neighbours; these name the objects the agent reaches directly."""

    def __init__(self, config) -> None:
        super().__init__()
        self.num_values = config.obs_num_values
        channels = config.obs_shape[-1]
        self.cell_embedding = nn.Embedding(channels * config.obs_num_values, config.obs_embed_dim)
        self.cell_table = config.obs_num_values**channels <= MAX_CELL_TABLE
        self.proj = nn.Linear(len(FRONT_CELLS) * config.obs_embed_dim, config.hidden_size)
        self.xs, self.ys = (list(axis) for axis in zip(*FRONT_CELLS, strict=True))

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        """observations [B, T, 7, 7, 3] (values in [0, obs_num_values)) -> [B, T, H]."""
        cells = observations[:, :, self.xs, self.ys].long()  # [B, T, len(FRONT_CELLS), 3]
        embedded = embed_cells(self.cell_embedding, cells, self.num_values, self.cell_table)
        return self.proj(embedded.flatten(-2))


class TrajectoryEncoder(nn.Module):
    """Speaker encoder (App. D): frame features and linearly embedded actions -> GRU -> h_tau. With
    ``trajectory_front_cells`` (not in the paper) each frame's features also get its :class:`FrontCells`."""

    backend: Backend = BACKENDS["default"]

    def __init__(self, config) -> None:
        super().__init__()
        self.action_embedding = nn.Embedding(config.num_actions, config.action_embed_dim)
        self.gru = nn.GRU(config.hidden_size + config.action_embed_dim, config.hidden_size, batch_first=True)
        # MSVAEConfig.posterior_reads_actions=False: the frames alone, zeros in the actions' place; the unread
        # embedding takes no gradient, which DDP would wait for (a speaker's config has no such field: it reads them)
        self.reads_actions = getattr(config, "posterior_reads_actions", True)
        self.action_embedding.requires_grad_(self.reads_actions)
        self.front_cells = FrontCells(config) if config.trajectory_front_cells else None

    def forward(self, frame_features: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor,
                observations: torch.Tensor | None = None) -> torch.Tensor:
        """frame_features [B, T, H], actions [B, T], mask [B, T], observations [B, T, 7, 7, 3] (read only with
        ``trajectory_front_cells``) -> h_tau [B, T, H] (zeros on padding)."""
        if self.front_cells is not None:
            if observations is None:
                raise ValueError("this trajectory encoder reads the front cells (trajectory_front_cells=True): "
                                 "pass the observations")
            frame_features = frame_features + self.front_cells(observations)
        if self.reads_actions:
            embedded = self.action_embedding(actions)
        else:
            embedded = frame_features.new_zeros(*frame_features.shape[:2], self.action_embedding.embedding_dim)
        x = torch.cat([frame_features, embedded], dim=-1)
        return self.backend.recurrence(self.gru, x, mask)


class InstructionEncoder(nn.Module):
    """Follower encoder f_enc (Sec. 2.2): word embeddings -> bidirectional GRU -> h_y and a summary s_y."""

    backend: Backend = BACKENDS["default"]

    def __init__(self, config) -> None:
        super().__init__()
        if config.hidden_size % 2:
            raise ValueError(f"hidden_size must be even for the bidirectional encoder, got {config.hidden_size}")
        self.word_embedding = nn.Embedding(config.vocab_size, config.word_embed_dim, padding_idx=config.pad_token_id)
        self.gru = nn.GRU(config.word_embed_dim, config.hidden_size // 2, batch_first=True, bidirectional=True)

    def forward(self, input_ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """input_ids [B, L], mask [B, L] -> (h_y [B, L, H], summary [B, H])."""
        states = self.backend.recurrence(self.gru, self.word_embedding(input_ids), mask)
        half = states.shape[-1] // 2
        last = mask.long().sum(1).clamp(min=1) - 1
        forward_last = states[torch.arange(states.shape[0], device=states.device), last, :half]
        summary = torch.cat([forward_last, states[:, 0, half:]], dim=-1)
        return states, summary



class BottleneckAttention(nn.Module):
    """Bottleneck attention (Sec. 3.2): K learned query tokens e_1..e_K attend over encoder states h.

    Returns the mean and log-variance of K Gaussian tokens z = [z_1..z_K], each D-dimensional: the
    variational posterior q(z|x) of one modality. Keys are masked so padding is never attended.
    """

    backend: Backend = BACKENDS["default"]

    def __init__(self, config, input_size: int) -> None:
        super().__init__()
        self.queries = nn.Parameter(torch.empty(config.num_latent_tokens, config.hidden_size))
        self.key_proj = Linear(input_size, config.hidden_size)
        self.attention = nn.MultiheadAttention(config.hidden_size, config.decoder_heads, batch_first=True)
        self.to_mean = Linear(config.hidden_size, config.latent_dim)
        self.to_logvar = Linear(config.hidden_size, config.latent_dim)

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """states [B, S, input_size], mask [B, S] -> (mean, logvar), each [B, K, D].

        ``self.attention``'s own weights, applied as it would: the queries are projected once for the whole
        batch, keys and values at the real positions only.
        """
        attention, hidden = self.attention, self.queries.shape[1]
        w_q, w_kv = attention.in_proj_weight.split([hidden, 2 * hidden])
        b_q, b_kv = attention.in_proj_bias.split([hidden, 2 * hidden])
        layout = self.backend.positions(mask)
        key_values = self.backend.linear(self.key_proj(layout.gather(states)), w_kv, b_kv)
        heads = attention.num_heads

        def split(x: torch.Tensor) -> torch.Tensor:  # [b, n, H] -> [b, heads, n, H / heads]
            return x.view(x.shape[0], x.shape[1], heads, hidden // heads).transpose(1, 2)

        queries = split(self.backend.linear(self.queries, w_q, b_q).unsqueeze(0))

        def attend(key_values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # [b, n, 2H], [b, n] -> [b, K, H]
            keys, values = key_values.chunk(2, -1)
            tokens = F.scaled_dot_product_attention(
                queries.expand(keys.shape[0], -1, -1, -1), split(keys), split(values),
                attn_mask=mask[:, None, None, :], dropout_p=attention.dropout if self.training else 0.0,
            )
            return tokens.transpose(1, 2).reshape(keys.shape[0], -1, hidden)

        tokens = attention.out_proj(self.backend.attend_over(attend, key_values, layout, mask))
        return self.to_mean(tokens), self.to_logvar(tokens).clamp(-10.0, 10.0)


class LatentPrior(nn.Module):
    """Prior p(z) over K tokens (App. D): N(0, I), or autoregressive p(z_k | z_<k) with a GRU (Hafner et al.)."""

    def __init__(self, config) -> None:
        super().__init__()
        self.kind = config.prior
        self.latent_dim = config.latent_dim
        if self.kind == "autoregressive":
            self.gru = nn.GRU(config.latent_dim, config.prior_hidden_size, batch_first=True)
            self.head = Linear(config.prior_hidden_size, 2 * config.latent_dim)

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Prior parameters for each token given the sampled previous tokens: z [B, K, D] -> (mean, logvar)."""
        if self.kind == "normal":
            return torch.zeros_like(z), torch.zeros_like(z)
        previous = torch.cat([torch.zeros_like(z[:, :1]), z[:, :-1]], dim=1)  # z_0 = 0, z_1..z_{K-1}
        out, _ = self.gru(previous)
        mean, logvar = self.head(out).chunk(2, dim=-1)
        return mean, logvar.clamp(-10.0, 10.0)


class LuongAttention(nn.Module):
    """f_att (Sec. 2.2): context c_t from query h'_t over a memory (h_y, or z), masked, "general" score."""

    def __init__(self, query_size: int, memory_size: int) -> None:
        super().__init__()
        self.memory_proj = Linear(memory_size, query_size)

    backend: Backend = BACKENDS["default"]

    def forward(
        self, query: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor | None, layout: Layout | None = None
    ) -> torch.Tensor:
        """query [B, T, H] (or [N, H] at the positions of ``layout``, which only the backend's attention reads),
        memory [B, M, Dm], memory_mask [B, M] (None: every slot real) -> context in the query's form."""
        return self.backend.attend_from(_luong, query, layout, self.memory_proj(memory), memory_mask)


def _luong(query: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Softmax of the scaled scores of query [b, n, H] on values [b, M, H] (slots where ``mask`` [b, M] is
    False left out), times the values: [b, n, H]."""
    scores = query @ values.transpose(1, 2) / math.sqrt(query.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask.bool().unsqueeze(1), torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1) @ values


class FiLMGenerator(nn.Module):
    """The FiLM parameters of the frames from a memory (h_y, or z): ``decoder_heads`` queries read the memory by
    :class:`LuongAttention`, their contexts -> (gamma, beta) for the C channels of each modulated map (film_layers).

    ``follower_conditioning="film"``: the queries are learned constants Q, so the memory is read once per episode
    and the memory LSTM runs over whole sequences. ``"film_recurrent"``: the queries are a linear map W h'_{t-1} of
    the memory LSTM's previous state, as BabyAI 1.1 keys its attention over the instruction, so that each step reads
    the part of the instruction it has reached; training runs step by step. ``"film_both"``: Q + W h'_{t-1}, with W
    starting at zero, so that it starts as ``film`` (the instruction read from the first step, which gives the state
    something to key by) and learns to move its reading from goal to goal.
    """

    def __init__(self, config, memory_size: int) -> None:
        super().__init__()
        self.heads, self.hidden_size = config.decoder_heads, config.hidden_size
        kind = config.conditioning
        self.keyed = kind.keyed
        if self.keyed:
            self.key = Linear(config.hidden_size, config.decoder_heads * config.hidden_size)
            self.key.starts_at_zero = kind.learned_queries  # the sum starts as the learned queries alone
        if kind.learned_queries:
            self.queries = nn.Parameter(torch.empty(config.decoder_heads, config.hidden_size))
        self.attention = LuongAttention(config.hidden_size, memory_size)
        self.out = Linear(config.decoder_heads * config.hidden_size, 2 * config.obs_channels * config.film_layers)

    def forward(
        self, memory: torch.Tensor, memory_mask: torch.Tensor | None, state: torch.Tensor | None = None
    ) -> torch.Tensor:
        """memory [B, M, Dm], memory_mask [B, M] (None: every slot real), and for a keyed generator the memory
        LSTM's previous state [B, H] -> (gamma, beta) as [B, 2CL]."""
        return self.read(self.project(memory), memory_mask, state)

    def project(self, memory: torch.Tensor) -> torch.Tensor:
        """The memory as the attention's values, [B, M, H]: computed once for all the steps that read it."""
        return self.attention.memory_proj(memory)

    def read(
        self, values: torch.Tensor, memory_mask: torch.Tensor | None, state: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(gamma, beta) [B, 2CL] from the projected memory (:meth:`project`) and, for a keyed generator, the memory
        LSTM's previous state [B, H]."""
        queries = self.queries.expand(values.shape[0], -1, -1) if hasattr(self, "queries") else 0
        if self.keyed:
            queries = queries + self.key(state).view(state.shape[0], self.heads, self.hidden_size)
        return self.out(_luong(queries, values, memory_mask).flatten(1))


class ActionDecoder(nn.Module):
    """Follower decoder p(a_t | memory, o_1:t, a_1:t-1) (Sec. 2.2, Eq. 5).

    h'_t = LSTM([f(o_t), emb(a_{t-1})]);  c_t = f_att(h'_t, memory);  logits = f_act([c_t, h'_t]).

    ``follower_conditioning="film"``: the memory also modulates the frames' convolution map,
    f(o_t) = ObservationEncoder.head(map(o_t), FiLM(memory)) (:class:`FiLMGenerator`), so that h'_t reads the
    instruction; ``"film_recurrent"`` and ``"film_both"``: f(o_t) = head(map(o_t), FiLM(memory, h'_{t-1})), the
    memory read at each step by attention keyed by the LSTM's previous state, as BabyAI 1.1's model (App. D) does
    (:meth:`film_states`);
    ``"head"``: the memory enters only through c_t.
    ``previous_action_input=False`` drops emb(a_{t-1}) from the LSTM's input (BabyAI's model has none).
    """

    backend: Backend = BACKENDS["default"]

    def __init__(self, config, memory_size: int) -> None:
        super().__init__()
        self.start_action = config.num_actions  # a_0: an extra embedding row
        self.reads_previous_action = config.previous_action_input
        extra = config.action_embed_dim if self.reads_previous_action else 0
        if self.reads_previous_action:
            self.action_embedding = nn.Embedding(config.num_actions + 1, config.action_embed_dim)
        self.film = FiLMGenerator(config, memory_size) if config.conditioning.films_frames else None
        self.recurrent_film = self.film is not None and self.film.keyed
        self.lstm = nn.LSTM(config.hidden_size + extra, config.hidden_size, batch_first=True)
        self.attention = LuongAttention(config.hidden_size, memory_size)
        self.head = nn.Sequential(
            Linear(2 * config.hidden_size, config.hidden_size), nn.Tanh(),
            Linear(config.hidden_size, config.num_actions),
        )

    def film_parameters(self, memory: torch.Tensor, memory_mask: torch.Tensor | None) -> torch.Tensor | None:
        """The frames' FiLM parameters [B, 2CL] read once from a memory, or None where the memory enters at the
        head only or is read at each step (the keyed kinds)."""
        return None if self.film is None or self.recurrent_film else self.film(memory, memory_mask)

    def step_film(
        self,
        memory: torch.Tensor,
        memory_mask: torch.Tensor | None,
        film: torch.Tensor | None,
        state: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> torch.Tensor | None:
        """One step's FiLM parameters for online control: ``film`` (:meth:`film_parameters`' per-episode ones), or
        for the keyed kinds the memory read by the LSTM's previous state (``state``, (h, c) as [1, n, H]; None
        at the first step)."""
        if not self.recurrent_film:
            return film
        h = memory.new_zeros(memory.shape[0], self.lstm.hidden_size) if state is None else state[0][0]
        return self.film(memory, memory_mask, h)

    def run(
        self, frames, actions: torch.Tensor, mask: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """h'_t for all t, [B, T, H] with zeros on padding, from a batch's encoded frames
        (:class:`~msvae_hf.models.frames.EncodedFrames`) conditioned on the memory as ``follower_conditioning``
        says."""
        if self.recurrent_film:
            maps, directions = frames.padded()
            return self.film_states(frames.encoder, maps, directions, actions, mask, memory, memory_mask)
        return self.states(frames.features(self.film_parameters(memory, memory_mask)), actions, mask)

    def run_each(
        self, frames, actions: torch.Tensor, mask: torch.Tensor, memories: Sequence[torch.Tensor],
        plain: torch.Tensor | None = None,
    ) -> list[torch.Tensor]:
        """h'_t [b, T, H] under each memory of ``memories`` (each [b, K, D], every slot real: it conditions the
        batch's first b rows), as :meth:`run` gives it. Where the memory enters at the head only, h'_t does not
        depend on it: one pass over the batch (its frame features ``plain`` where already computed) serves all."""
        if self.film is None:
            states = self.states(frames.features() if plain is None else plain, actions, mask)
            return [states[: len(memory)] for memory in memories]
        return [self.run(frames.first_rows(len(memory)), actions[: len(memory)], mask[: len(memory)], memory, None)
                for memory in memories]

    def film_states(
        self,
        encoder: nn.Module,
        maps: torch.Tensor,
        directions: torch.Tensor,
        actions: torch.Tensor,
        mask: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """A keyed FiLM's h'_t, step by step over the padded batch: maps [B, T, C, h, w] (the observation
        encoder's trunk), directions and actions [B, T] -> [B, T, H], zeros on padding. Step t's FiLM reads the
        memory keyed by h'_{t-1} (zeros at t = 1); the padded steps after a row's end are computed and zeroed."""
        previous, values = self.previous_actions(actions), self.film.project(memory)
        weights = (self.lstm.weight_ih_l0, self.lstm.weight_hh_l0, self.lstm.bias_ih_l0, self.lstm.bias_hh_l0)
        h = c = maps.new_zeros(mask.shape[0], self.lstm.hidden_size)
        states = []
        for t in range(mask.shape[1]):
            features = encoder.head(maps[:, t], directions[:, t], self.film.read(values, memory_mask, h))
            h, c = torch.lstm_cell(self._inputs(features, previous[:, t]), (h, c), *weights)
            states.append(h)
        return torch.stack(states, 1) * mask.unsqueeze(-1).to(h.dtype)

    def previous_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """[B, T] actions -> [B, T] a_{t-1} with the start token at t=0."""
        start = torch.full_like(actions[:, :1], self.start_action)
        return torch.cat([start, actions[:, :-1]], dim=1)

    def _inputs(self, frame_features: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
        if not self.reads_previous_action:
            return frame_features
        return torch.cat([frame_features, self.action_embedding(previous)], dim=-1)

    def states(self, frame_features: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """h'_t for all t in parallel: [B, T, H], zeros on padding (the LSTM runs over the real steps only)."""
        return self.backend.recurrence(self.lstm, self._inputs(frame_features, self.previous_actions(actions)), mask)

    def logits(
        self, states: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor | None, layout: Layout | None = None
    ) -> torch.Tensor:
        """a_t = f_act(c_t, h'_t): states [B, T, H] -> logits [B, T, num_actions]; or states [N, H] at the
        positions of ``layout`` (which only the backend's attention reads) -> [N, num_actions]."""
        return self.head(torch.cat([self.attention(states, memory, memory_mask, layout), states], dim=-1))

    forward = logits  # so that torch.func.functional_call can run it with other (e.g. detached) weights

    def step(
        self,
        frame_features: torch.Tensor,
        previous_action: torch.Tensor,
        state: tuple[torch.Tensor, torch.Tensor] | None,
        memory: torch.Tensor,
        memory_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """One step for online control: frame_features [n, H], previous_action [n] -> (logits [n, A], state)."""
        out, state = self.lstm(self._inputs(frame_features, previous_action).unsqueeze(1), state)
        return self.logits(out, memory, memory_mask)[:, 0], state


class _DecoderLayer(nn.Module):
    """Pre-norm transformer decoder layer: causal self-attention (with a KV cache), cross-attention, MLP."""

    backend: Backend = BACKENDS["default"]

    def __init__(self, config) -> None:
        super().__init__()
        d, self.heads = config.hidden_size, config.decoder_heads
        self.qkv = Linear(d, 3 * d)
        self.self_out = Linear(d, d)
        self.cross_q = Linear(d, d)
        self.cross_kv = Linear(d, 2 * d)
        self.cross_out = Linear(d, d)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.mlp = nn.Sequential(Linear(d, config.decoder_ffn_dim), nn.GELU(), Linear(config.decoder_ffn_dim, d))
        self.dropout = nn.Dropout(config.dropout)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        return x.view(b, n, self.heads, d // self.heads).transpose(1, 2)

    def _merge(self, x: torch.Tensor) -> torch.Tensor:
        b, h, n, dh = x.shape
        return x.transpose(1, 2).reshape(b, n, h * dh)

    def forward(self, x, memory, memory_mask, cache=None, layer_idx: int = 0, layout: Layout | None = None
                ) -> torch.Tensor:
        """x [B, n, d], or [N, d] at the positions of ``layout`` (the projections, norms and MLP then skip padding;
        only the backend's attention reads ``layout``)."""
        return self.cross_attend(self.self_attend(x, cache, layer_idx, layout), memory, memory_mask, layout)

    def self_attend(self, x, cache=None, layer_idx: int = 0, layout: Layout | None = None) -> torch.Tensor:
        """The causal self-attention block (it does not read the memory): x + SelfAttn(LN(x)). A right-padded
        row's real tokens see only real tokens under the causal mask, however far it is padded."""
        if cache is not None and layout is not None:
            raise ValueError("a layout of real positions is for teacher forcing: pass no cache")

        def attend(qkv: torch.Tensor) -> torch.Tensor:  # [b, n, 3d] -> [b, n, d]
            q, k, v = (self._split(t) for t in qkv.chunk(3, dim=-1))
            past = 0
            if cache is not None:
                past = cache.get_seq_length(layer_idx)
                k, v = cache.update(k, v, layer_idx)
            n, total = q.shape[2], k.shape[2]
            if past == 0 and n == total:  # no earlier tokens: the kernel's own causal mask, none built
                return self._merge(F.scaled_dot_product_attention(q, k, v, is_causal=True))
            causal = torch.arange(total, device=x.device)[None, :] <= (past + torch.arange(n, device=x.device))[:, None]
            return self._merge(F.scaled_dot_product_attention(q, k, v, attn_mask=causal))

        return x + self.dropout(self.self_out(self.backend.attend_from(attend, self.qkv(self.norm1(x)), layout)))

    def cross_attend(self, x, memory, memory_mask, layout: Layout | None = None) -> torch.Tensor:
        """The cross-attention and MLP blocks: x + CrossAttn(LN(x), memory), then + MLP(LN(.)).
        ``memory_mask`` None: every memory slot is real (no mask built)."""

        def attend(q: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor | None) -> torch.Tensor:
            k, v = memory.chunk(2, dim=-1)
            mask = None if memory_mask is None else memory_mask.bool()[:, None, None, :]
            return self._merge(F.scaled_dot_product_attention(self._split(q), self._split(k), self._split(v),
                                                              attn_mask=mask))

        q = self.cross_q(self.norm2(x))
        x = x + self.dropout(self.cross_out(self.backend.attend_from(attend, q, layout, self.cross_kv(memory),
                                                                     memory_mask)))
        return x + self.dropout(self.mlp(self.norm3(x)))



class InstructionDecoder(nn.Module):
    """Speaker decoder p(y_l | memory, y_<l) (App. D: a two-layer transformer decoder).

    Cross-attends over a memory: h_tau for the baseline speaker, z for MS-VAE. Supports a transformers
    ``Cache`` so ``generate()`` decodes incrementally.
    """

    def __init__(self, config, memory_size: int) -> None:
        super().__init__()
        d = config.hidden_size
        self.token_embedding = nn.Embedding(config.vocab_size, d, padding_idx=config.pad_token_id)
        self.position_embedding = nn.Embedding(config.max_instruction_length, d)
        self.memory_proj = Linear(memory_size, d)
        self.layers = nn.ModuleList(_DecoderLayer(config) for _ in range(config.decoder_layers))
        self.norm = nn.LayerNorm(d)
        self.lm_head = Linear(d, config.vocab_size)
        self.max_length = config.max_instruction_length

    def forward(
        self,
        input_ids: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor | None,
        cache=None,
        layout: Layout | None = None,
    ) -> torch.Tensor:
        """input_ids [B, n] (the new tokens), memory [B, M, Dm] -> logits [B, n, vocab].

        ``memory_mask`` [B, M]: the real memory slots (None: all of them). With ``layout`` (teacher forcing, no
        cache; the backend's layout of the [B, n] token mask) every position-wise layer runs on its positions only
        and the logits are theirs, [N, vocab]; attention still sees the padded [B, n] layout.

        Teacher forcing may decode each instruction under several memories: ``memory`` [k * B, M, Dm] holds k per
        instruction (memory j of row b at j * B + b), and the logits are [k * B, n, vocab] (or [k * N, vocab]) in
        that order. The first layer's self-attention, which does not read the memory, runs once for all k (one
        dropout mask for them where dropout is on).
        """
        past = cache.get_seq_length() if cache is not None else 0
        if past + input_ids.shape[1] > self.max_length:
            raise ValueError(
                f"instruction length {past + input_ids.shape[1]} exceeds max_instruction_length={self.max_length}"
            )
        rows = input_ids.shape[0]
        memories, rest = divmod(memory.shape[0], rows) if rows else (1, memory.shape[0])
        if rest or not memories:
            raise ValueError(f"memory must hold one or more rows per instruction ({input_ids.shape[0]} instructions), "
                             f"got {memory.shape[0]}")
        if cache is not None and memories > 1:
            raise ValueError(f"{memories} memories per instruction are for teacher forcing: pass no cache")
        if cache is not None and layout is not None:
            raise ValueError("a layout of real positions is for teacher forcing: pass no cache")
        steps = torch.arange(past, past + input_ids.shape[1], device=input_ids.device)
        x = self.token_embedding(input_ids) + self.position_embedding(steps)
        if layout is not None:
            x = layout.gather(x)
        mem = self.memory_proj(memory)
        for i, layer in enumerate(self.layers):
            x = layer.self_attend(x, cache, i, layout)
            if i == 0 and memories > 1:
                x = x.repeat(memories, *[1] * (x.dim() - 1))
                layout = layout.repeat(memories) if layout is not None else None
            x = layer.cross_attend(x, mem, memory_mask, layout)
        return self.lm_head(self.norm(x))
