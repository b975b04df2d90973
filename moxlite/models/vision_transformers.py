"""Swin Transformer (Liu et al. 2021) and ViT (Dosovitskiy et al. 2021), written to run fast.

Written the way the Swin reproduction on Ascend learned to (seed 003): gathers and
strided indexing are slow there, so

- attention projects q, k and v with three Dense layers (not one fused qkv split by
  indexing);
- patch embedding, patch merging and window partitioning are reshape/transpose
  (no ``x[:, 0::2, 0::2]`` slices);
- the relative position bias is a matmul of a fixed one-hot matrix with the bias table
  (no gather by ``relative_position_index``).

Softmax, LayerNormalization and GELU are Keras layers, so mixed-precision keep-lists
(``moxlite.training.mixed_precision.levels``) see them. keras-hub's Swin was not reused: it fuses qkv,
merges patches by strided slices and gathers the bias (the three patterns above), and
it pulls in tensorflow-text, kagglehub and tokenizers.

Swin-T: patch 4, embed 96, depths (2, 2, 6, 2), heads (3, 6, 12, 24), window 7, MLP
ratio 4, drop path 0.2. ViT-Ti: patch 16, embed 192, depth 12, heads 3; classifies
the mean of the tokens (no class token).
"""

import numpy as np
import keras
from keras import ops


class DropPath(keras.layers.Layer):
    """Stochastic depth: drops a sample's whole residual branch with probability ``rate``."""

    def __init__(self, rate=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.rate = rate
        self.seed_generator = keras.random.SeedGenerator(seed) if rate else None

    def call(self, x, training=None):
        if not training or not self.rate:
            return x
        keep = 1.0 - self.rate
        shape = (ops.shape(x)[0],) + (1,) * (len(x.shape) - 1)
        mask = ops.floor(keep + keras.random.uniform(shape, seed=self.seed_generator, dtype=x.dtype))
        return x / ops.cast(keep, x.dtype) * mask


def relative_position_one_hot(window_size):
    """[N*N, (2w-1)^2] one-hot rows: token pair (i, j) -> its relative-offset bucket (N = w*w)."""
    coords = np.stack(np.meshgrid(np.arange(window_size), np.arange(window_size), indexing="ij")).reshape(2, -1)
    relative = coords[:, :, None] - coords[:, None, :] + window_size - 1          # [2, N, N], each in [0, 2w-2]
    index = (relative[0] * (2 * window_size - 1) + relative[1]).reshape(-1)
    one_hot = np.zeros((index.size, (2 * window_size - 1) ** 2), np.float32)
    one_hot[np.arange(index.size), index] = 1.0
    return one_hot


def shifted_window_mask(height, width, window_size, shift):
    """[windows, N, N] additive mask: -100 between tokens that the cyclic shift made neighbours."""
    region = np.zeros((height, width), np.int32)
    bounds = (slice(0, -window_size), slice(-window_size, -shift), slice(-shift, None))
    label = 0
    for rows in bounds:
        for cols in bounds:
            region[rows, cols] = label
            label += 1
    windows = region.reshape(height // window_size, window_size, width // window_size, window_size)
    windows = windows.transpose(0, 2, 1, 3).reshape(-1, window_size * window_size)
    return np.where(windows[:, :, None] == windows[:, None, :], 0.0, -100.0).astype(np.float32)


class SelfAttention(keras.layers.Layer):
    """Multi-head self-attention over [batch, tokens, dim], optionally with a Swin relative bias.

    ``call(x, attention_mask)``: ``attention_mask`` [windows, N, N] is added to the scores of each window
    (x's batch is batch * windows, windows innermost).
    """

    def __init__(self, dim, num_heads, window_size=None, **kwargs):
        super().__init__(**kwargs)
        self.dim, self.num_heads, self.window_size = dim, num_heads, window_size
        self.head_dim = dim // num_heads
        self.query = keras.layers.Dense(dim, name="query")
        self.key = keras.layers.Dense(dim, name="key")
        self.value = keras.layers.Dense(dim, name="value")
        self.softmax = keras.layers.Softmax(axis=-1, name="softmax")
        self.projection = keras.layers.Dense(dim, name="projection")
        if window_size:
            self.bias_one_hot = relative_position_one_hot(window_size)

    def build(self, input_shape):
        if self.window_size:
            self.bias_table = self.add_weight(
                shape=((2 * self.window_size - 1) ** 2, self.num_heads), name="relative_position_bias",
                initializer=keras.initializers.TruncatedNormal(stddev=0.02))

    def _heads(self, x, tokens):
        return ops.transpose(ops.reshape(x, (-1, tokens, self.num_heads, self.head_dim)), (0, 2, 1, 3))

    def call(self, x, attention_mask=None):
        tokens = x.shape[1]
        q = self._heads(self.query(x), tokens) * ops.cast(self.head_dim ** -0.5, x.dtype)
        k = self._heads(self.key(x), tokens)
        v = self._heads(self.value(x), tokens)
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2)))                    # [B_, heads, N, N]
        if self.window_size:
            bias = ops.matmul(ops.cast(self.bias_one_hot, x.dtype), ops.cast(self.bias_table, x.dtype))
            scores = scores + ops.transpose(ops.reshape(bias, (tokens, tokens, self.num_heads)), (2, 0, 1))
        if attention_mask is not None:
            windows = attention_mask.shape[0]
            scores = ops.reshape(scores, (-1, windows, self.num_heads, tokens, tokens))
            scores = scores + ops.cast(attention_mask, scores.dtype)[None, :, None]
            scores = ops.reshape(scores, (-1, self.num_heads, tokens, tokens))
        weights = self.softmax(scores)
        out = ops.transpose(ops.matmul(weights, v), (0, 2, 1, 3))
        return self.projection(ops.reshape(out, (-1, tokens, self.dim)))


class Mlp(keras.layers.Layer):
    """Dense(ratio * dim), GELU (its own layer, for keep-lists), Dense(dim)."""

    def __init__(self, dim, ratio=4.0, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(int(dim * ratio), name="hidden")
        self.gelu = keras.layers.Activation("gelu", name="gelu")
        self.out = keras.layers.Dense(dim, name="out")

    def call(self, x):
        return self.out(self.gelu(self.hidden(x)))


class TransformerBlock(keras.layers.Layer):
    """Pre-norm block: x + attention(LN(x)), then x + MLP(LN(x)), each through DropPath.

    Windowed (Swin) when ``window_size`` is set: on [B, H, W, C] inputs, attention runs
    within w x w windows, cyclically shifted by ``shift``; otherwise on [B, N, C] tokens.
    """

    def __init__(self, dim, num_heads, window_size=None, shift=0, mlp_ratio=4.0, drop_path=0.0,
                 seed=None, **kwargs):
        super().__init__(**kwargs)
        self.window_size, self.shift = window_size, shift
        self.norm1 = keras.layers.LayerNormalization(epsilon=1e-5, name="norm1")
        self.attention = SelfAttention(dim, num_heads, window_size, name="attention")
        self.norm2 = keras.layers.LayerNormalization(epsilon=1e-5, name="norm2")
        self.mlp = Mlp(dim, mlp_ratio, name="mlp")
        self.drop_path = DropPath(drop_path, seed=seed, name="drop_path")
        self.mask = None

    def build(self, input_shape):
        if self.window_size and self.shift:
            self.mask = shifted_window_mask(input_shape[1], input_shape[2], self.window_size, self.shift)

    def _windowed_attention(self, x):
        _, height, width, channels = x.shape
        w = self.window_size
        if self.shift:
            x = ops.roll(x, shift=(-self.shift, -self.shift), axis=(1, 2))
        windows = ops.reshape(x, (-1, height // w, w, width // w, w, channels))
        windows = ops.reshape(ops.transpose(windows, (0, 1, 3, 2, 4, 5)), (-1, w * w, channels))
        windows = self.attention(windows, attention_mask=self.mask)
        x = ops.reshape(windows, (-1, height // w, width // w, w, w, channels))
        x = ops.reshape(ops.transpose(x, (0, 1, 3, 2, 4, 5)), (-1, height, width, channels))
        if self.shift:
            x = ops.roll(x, shift=(self.shift, self.shift), axis=(1, 2))
        return x

    def call(self, x, training=None):
        normed = self.norm1(x)
        attended = self._windowed_attention(normed) if self.window_size else self.attention(normed)
        x = x + self.drop_path(attended, training=training)
        return x + self.drop_path(self.mlp(self.norm2(x)), training=training)


class PatchEmbedding(keras.layers.Layer):
    """Non-overlapping p x p patches by reshape/transpose, then Dense(dim): [B, H/p, W/p, dim]."""

    def __init__(self, patch_size, dim, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = patch_size
        self.dense = keras.layers.Dense(dim, name="dense")

    def call(self, images):
        _, height, width, channels = images.shape
        p = self.patch_size
        x = ops.reshape(images, (-1, height // p, p, width // p, p, channels))
        x = ops.reshape(ops.transpose(x, (0, 1, 3, 2, 4, 5)), (-1, height // p, width // p, p * p * channels))
        return self.dense(x)


class PatchMerging(keras.layers.Layer):
    """2x2 neighbours concatenated by reshape/transpose, LayerNorm, Dense(2C): halves H and W."""

    def __init__(self, dim, **kwargs):
        super().__init__(**kwargs)
        self.norm = keras.layers.LayerNormalization(epsilon=1e-5, name="norm")
        self.reduction = keras.layers.Dense(2 * dim, use_bias=False, name="reduction")

    def call(self, x):
        _, height, width, channels = x.shape
        x = ops.reshape(x, (-1, height // 2, 2, width // 2, 2, channels))
        x = ops.reshape(ops.transpose(x, (0, 1, 3, 4, 2, 5)), (-1, height // 2, width // 2, 4 * channels))
        return self.reduction(self.norm(x))


def swin(image_shape, num_classes, patch_size=4, embed_dim=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24),
         window_size=7, mlp_ratio=4.0, drop_path=0.2, seed=0):
    """A Swin Transformer classifier (Swin-T by default) as a Keras functional model."""
    height, width = image_shape[0] // patch_size, image_shape[1] // patch_size
    inputs = keras.Input(tuple(image_shape))
    x = PatchEmbedding(patch_size, embed_dim, name="patch_embedding")(inputs)
    x = keras.layers.LayerNormalization(epsilon=1e-5, name="patch_norm")(x)
    rates = np.linspace(0.0, drop_path, sum(depths))
    dim, block = embed_dim, 0
    for stage, (depth, heads) in enumerate(zip(depths, num_heads)):
        window = min(window_size, height, width)
        if height % window or width % window:
            raise ValueError(f"swin: stage {stage} is {height}x{width} tokens, not a multiple of the "
                             f"window {window}; choose image_shape, patch_size and window_size to fit")
        for index in range(depth):
            shift = window // 2 if index % 2 and window < min(height, width) else 0
            x = TransformerBlock(dim, heads, window, shift, mlp_ratio, float(rates[block]), seed=seed + block,
                                 name=f"stage{stage}_block{index}")(x)
            block += 1
        if stage < len(depths) - 1:
            x = PatchMerging(dim, name=f"stage{stage}_merging")(x)
            dim, height, width = dim * 2, height // 2, width // 2
    x = keras.layers.LayerNormalization(epsilon=1e-5, name="norm")(x)
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes, name="head")(x), name="swin")


def vit(image_shape, num_classes, patch_size=16, embed_dim=192, depth=12, num_heads=3, mlp_ratio=4.0,
        drop_path=0.1, seed=0):
    """A ViT classifier (ViT-Ti by default) on the mean token, as a Keras functional model."""
    inputs = keras.Input(tuple(image_shape))
    x = PatchEmbedding(patch_size, embed_dim, name="patch_embedding")(inputs)
    tokens = (image_shape[0] // patch_size) * (image_shape[1] // patch_size)
    x = keras.layers.Reshape((tokens, embed_dim), name="tokens")(x)
    x = PositionEmbedding(name="position_embedding")(x)
    for index, rate in enumerate(np.linspace(0.0, drop_path, depth)):
        x = TransformerBlock(embed_dim, num_heads, mlp_ratio=mlp_ratio, drop_path=float(rate), seed=seed + index,
                             name=f"block{index}")(x)
    x = keras.layers.LayerNormalization(epsilon=1e-6, name="norm")(x)
    x = keras.layers.GlobalAveragePooling1D(name="pool")(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes, name="head")(x), name="vit")


class PositionEmbedding(keras.layers.Layer):
    """Adds a learned [tokens, dim] position embedding."""

    def build(self, input_shape):
        self.embedding = self.add_weight(shape=tuple(input_shape[1:]), name="embedding",
                                         initializer=keras.initializers.TruncatedNormal(stddev=0.02))

    def call(self, x):
        return x + ops.cast(self.embedding, x.dtype)
