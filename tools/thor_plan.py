"""THOR's cost at scale, on paper: what ``python tools/bench_thor.py --plan`` prints.

For each preconditioned layer of a real Keras model (shapes read from the
model itself, no weights downloaded) it counts, per device:

- the factors all-reduced at a refresh: A is d_A x d_A, G is d_G x d_G, float32;
  as full matrices, and as only their diagonal blocks (all a blocked inverse
  needs);
- the FLOPs of a refresh: the factors (A = aT a over N rows: 2 N d^2 each, or
  2 N b^2 per diagonal block, since only the blocks are formed) and their
  inverses (Cholesky d^3/3 plus the solve against I, 2 d^3: 7/3 d^3 for each
  matrix or each diagonal block; a last, partial block is inverted padded to
  b x b, as thor does);
- the FLOPs of preconditioning one gradient, paid on every step, refresh or
  not: A^-1 . dW . G^-1 is 2 d_A^2 d_G + 2 d_A d_G^2 with full inverses, and
  2 d_A d_G (b_A + b_G) with b-blocks;
- the step's own matmul FLOPs for comparison: forward 2 N d_A d_G, backward
  twice that (the layers THOR preconditions hold nearly all of a CNN's or a
  Transformer's FLOPs);

then the amortised cost per step at a refresh frequency f:
preconditioning + refresh / f, in FLOPs and as a share of the step, and the
factor bytes per step against the gradient all-reduce every step already pays.
Counts are of multiply-adds as 2 FLOPs, with no credit for symmetry.
"""

import dataclasses

BYTES = 4  # float32 factors and gradients
RESNET50_FREQUENCY = 834
BERT_FREQUENCY = 100


@dataclasses.dataclass
class LayerShape:
    """One preconditioned layer: its factor sizes and the rows of one device's batch."""

    name: str
    kind: str
    d_a: int
    d_g: int
    rows: int
    diagonal_a: bool = False  # Embedding: A is a vector of token counts

    @property
    def parameters(self):
        return self.d_a * self.d_g


def _blocks(dimension, block_size):
    """Sizes of the diagonal blocks of a dimension (all of it when block_size is 0)."""
    if not block_size or block_size >= dimension:
        return [dimension]
    full, rest = divmod(dimension, block_size)
    return [block_size] * full + ([rest] if rest else [])


def factor_entries(layer, block_size):
    """Floats in the A and G a refresh all-reduces (full matrices, or only their diagonal blocks)."""
    a_entries = layer.d_a if layer.diagonal_a else sum(b * b for b in _blocks(layer.d_a, block_size))
    return a_entries + sum(b * b for b in _blocks(layer.d_g, block_size))


def refresh_flops(layer, block_size):
    """Forming A and G's diagonal blocks (all of them when block_size is 0) from one device's
    batch, then inverting the blocks (the last one padded to a whole block)."""
    forming = sum(2 * layer.rows * b * b for b in _blocks(layer.d_g, block_size))
    if layer.diagonal_a:
        forming += layer.rows
    else:
        forming += sum(2 * layer.rows * b * b for b in _blocks(layer.d_a, block_size))
    inverting = _inverting_flops(layer.d_g, block_size)
    if not layer.diagonal_a:
        inverting += _inverting_flops(layer.d_a, block_size)
    return forming + inverting


def _inverting_flops(dimension, block_size):
    blocks = _blocks(dimension, block_size)
    return 7 / 3 * len(blocks) * blocks[0] ** 3


def precondition_flops(layer, block_size):
    """A^-1 . dW . G^-1 once (every step)."""
    block_g = min(block_size or layer.d_g, layer.d_g)
    g_side = 2 * layer.d_a * layer.d_g * block_g
    if layer.diagonal_a:
        return g_side + layer.d_a * layer.d_g
    block_a = min(block_size or layer.d_a, layer.d_a)
    return 2 * layer.d_a * layer.d_g * block_a + g_side


def step_flops(layer):
    """Forward and backward matmul FLOPs of the layer on one device's batch (embedding: a gather, ~0)."""
    return 0 if layer.diagonal_a else 6 * layer.rows * layer.d_a * layer.d_g


# ----------------------------------------------------------------- shapes from Keras models

def einsum_factor_sizes(equation, kernel_shape):
    """(d_A, d_G) of an EinsumDense: the kernel's contracted axes and its output axes.

    'abc,cde->abde' with kernel (768, 12, 64) gives (768, 768): the axes the
    input and the kernel share are contracted (A's side), the axes the kernel
    and the output share are G's side.
    """
    inputs, output = equation.split("->")
    input_axes, kernel_axes = inputs.split(",")
    d_a = d_g = 1
    for letter, size in zip(kernel_axes, kernel_shape):
        if letter in input_axes and letter not in output:
            d_a *= size
        elif letter in output:
            d_g *= size
    return d_a, d_g


def resnet50_layers(batch_size, image_size=224, num_classes=1000):
    """The Conv2D and Dense layers of keras.applications.ResNet50, with their im2col rows."""
    import keras

    model = keras.applications.ResNet50(weights=None, input_shape=(image_size, image_size, 3), classes=num_classes)
    layers = []
    for layer in model.layers:
        if isinstance(layer, keras.layers.Conv2D):
            kh, kw, c_in, c_out = layer.kernel.shape
            _, height, width, _ = layer.output.shape
            layers.append(LayerShape(layer.name, f"Conv2D {kh}x{kw}", kh * kw * c_in, c_out, batch_size * height * width))
        elif isinstance(layer, keras.layers.Dense):
            d_in, d_out = layer.kernel.shape
            layers.append(LayerShape(layer.name, "Dense", d_in, d_out, batch_size))
    return layers, model.count_params()


def bert_base_layers(batch_size, sequence_length, num_layers=12, width=768, heads=12, ffn=3072, vocab=30522):
    """A BERT-base-shaped encoder built from Keras layers: MultiHeadAttention's EinsumDense and the FFN Dense."""
    import keras

    tokens = keras.Input((sequence_length,), dtype="int32")
    hidden = keras.layers.Embedding(vocab, width, name="word_embeddings")(tokens)
    for _ in range(num_layers):
        attended = keras.layers.MultiHeadAttention(heads, width // heads)(hidden, hidden)
        hidden = keras.layers.LayerNormalization()(hidden + attended)
        expanded = keras.layers.Dense(ffn, activation="gelu")(hidden)
        hidden = keras.layers.LayerNormalization()(hidden + keras.layers.Dense(width)(expanded))
    model = keras.Model(tokens, hidden)
    rows = batch_size * sequence_length
    layers = []
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, keras.layers.EinsumDense):
            d_a, d_g = einsum_factor_sizes(layer.equation, tuple(layer.kernel.shape))
            layers.append(LayerShape(layer.name, "EinsumDense", d_a, d_g, rows))
        elif isinstance(layer, keras.layers.Dense):
            d_in, d_out = layer.kernel.shape
            layers.append(LayerShape(layer.name, "Dense", d_in, d_out, rows))
        elif isinstance(layer, keras.layers.Embedding):
            layers.append(LayerShape(layer.name, "Embedding", layer.input_dim, layer.output_dim, rows, diagonal_a=True))
    return layers, model.count_params()


# ----------------------------------------------------------------- report

def _size(count, unit):
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(count) >= factor:
            return f"{count / factor:.2f} {prefix}{unit}"
    return f"{count:.0f} {unit}"


def plan_lines(title, layers, parameter_count, frequency, note, block_size=128):
    """The table of one model: full inverses against block_size-blocks."""
    step = sum(step_flops(layer) for layer in layers)
    gradient_bytes = parameter_count * BYTES
    widest = max(layers, key=lambda layer: max(0 if layer.diagonal_a else layer.d_a, layer.d_g))
    lines = [f"== {title}: {len(layers)} preconditioned layers, {parameter_count / 1e6:.1f} M parameters; {note}",
             f"   widest factor: {widest.name} ({widest.kind}) A {widest.d_a}x{widest.d_a}, G {widest.d_g}x{widest.d_g}",
             f"   one step's matmul FLOPs (forward + backward) per device: {_size(step, 'FLOP')}; "
             f"gradient all-reduce per step: {_size(gradient_bytes, 'B')}",
             f"   {'':<16}{'factor bytes':>14}{'refresh FLOPs':>16}{'precond./step':>16}"
             f"{f'amortised/step @f={frequency}':>34}{'factor bytes/step':>20}"]
    for label, size in (("full inverses", 0), (f"{block_size}-blocks", block_size)):
        factor_bytes = sum(factor_entries(layer, size) for layer in layers) * BYTES
        refresh = sum(refresh_flops(layer, size) for layer in layers)
        precondition = sum(precondition_flops(layer, size) for layer in layers)
        amortised = precondition + refresh / frequency
        lines.append(f"   {label:<16}{_size(factor_bytes, 'B'):>14}{_size(refresh, 'FLOP'):>16}"
                     f"{_size(precondition, 'FLOP'):>16}"
                     f"{_size(amortised, 'FLOP') + f' ({100 * amortised / step:.1f}% of step)':>34}"
                     f"{_size(factor_bytes / frequency, 'B'):>20}")
    lines.append(f"   (factor bytes/step: one refresh's all-reduce spread over {frequency} steps, against "
                 f"{_size(gradient_bytes, 'B')} of gradients every step. {block_size}-blocks: only the diagonal "
                 f"blocks formed, all-reduced and inverted, as moxlite's thor does with block_size={block_size})")
    return lines


def plan(resnet_batch=32, bert_batch=12, bert_sequence=128, block_size=128):
    """The --plan report: ResNet-50 at MindSpore's frequency 834, BERT-base and BERT-large at 100."""
    lines = []
    layers, parameters = resnet50_layers(resnet_batch)
    lines += plan_lines("ResNet-50 (keras.applications, 224x224, 1000 classes)", layers, parameters,
                        RESNET50_FREQUENCY, f"batch {resnet_batch} per device", block_size)
    lines.append("")
    layers, parameters = bert_base_layers(bert_batch, bert_sequence)
    lines += plan_lines("BERT-base encoder (12 x MultiHeadAttention(12, 64) + Dense 3072, word embeddings)",
                        layers, parameters, BERT_FREQUENCY,
                        f"batch {bert_batch} x {bert_sequence} tokens per device", block_size)
    lines.append("")
    layers, parameters = bert_base_layers(bert_batch, bert_sequence, num_layers=24, width=1024, heads=16, ffn=4096)
    lines += plan_lines("BERT-large encoder (24 x MultiHeadAttention(16, 64) + Dense 4096, word embeddings)",
                        layers, parameters, BERT_FREQUENCY,
                        f"batch {bert_batch} x {bert_sequence} tokens per device", block_size)
    lines.append("")
    lines.append("Factor bytes and refresh FLOPs do not grow with the number of devices: at 256 devices each "
                 "all-reduces the same factor bytes once a refresh, as it does its gradients every step.")
    return lines
