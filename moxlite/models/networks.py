"""Keras networks of the built-in models; each maps images to class logits.

Every builder takes the image shape and the class count and returns a
functional ``keras.Model``: its variables are created when it is constructed,
so constructing it inside a strategy scope places them there.
"""

import keras


def mlp(image_shape, num_classes, hidden_units=(128,), activation="relu", dropout=0.0):
    """Flatten, then Dense(units, activation) [+ Dropout] per hidden layer, then Dense(num_classes)."""
    images = keras.Input(shape=tuple(image_shape), name="images")
    x = keras.layers.Flatten()(images)
    for units in hidden_units:
        x = keras.layers.Dense(units, activation=activation)(x)
        if dropout:
            x = keras.layers.Dropout(dropout)(x)
    logits = keras.layers.Dense(num_classes, name="logits")(x)
    return keras.Model(images, logits, name="mlp")


def lenet(image_shape, num_classes, filters=(32, 64), kernel_size=5, dense_units=256, dropout=0.0):
    """LeNet-style CNN (LeCun et al. 1998): [conv k x k + ReLU, 2x2 max-pool] per filter count, dense, classifier."""
    images = keras.Input(shape=tuple(image_shape), name="images")
    x = images
    for count in filters:
        x = keras.layers.Conv2D(count, kernel_size, padding="same", activation="relu")(x)
        x = keras.layers.MaxPooling2D(2)(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(dense_units, activation="relu")(x)
    if dropout:
        x = keras.layers.Dropout(dropout)(x)
    logits = keras.layers.Dense(num_classes, name="logits")(x)
    return keras.Model(images, logits, name="lenet")


def resnet50(image_shape, num_classes, pooling="avg"):
    """ResNet-50 (He et al. 2016) from keras.applications, weights=None, with a Dense logits head."""
    backbone = keras.applications.ResNet50(include_top=False, weights=None, input_shape=tuple(image_shape),
                                           pooling=pooling)
    logits = keras.layers.Dense(num_classes, name="logits")(backbone.output)
    return keras.Model(backbone.input, logits, name="resnet50")


def _residual_block(x, width, stride):
    """Two 3x3 conv-BN layers and an identity (or 1x1 projection) shortcut, ReLU after the sum."""
    shortcut = x
    y = keras.layers.Conv2D(width, 3, strides=stride, padding="same", use_bias=False)(x)
    y = keras.layers.BatchNormalization()(y)
    y = keras.layers.ReLU()(y)
    y = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(y)
    y = keras.layers.BatchNormalization()(y)
    if stride != 1 or shortcut.shape[-1] != width:
        shortcut = keras.layers.Conv2D(width, 1, strides=stride, use_bias=False)(shortcut)
        shortcut = keras.layers.BatchNormalization()(shortcut)
    return keras.layers.ReLU()(keras.layers.Add()([y, shortcut]))


def small_resnet(image_shape, num_classes, depth=20, base_width=16):
    """The CIFAR ResNet of He et al. 2016 (section 4.2): depth 6n + 2, three stages of n blocks.

    Stage widths are base_width x (1, 2, 4); stages 2 and 3 halve the
    resolution, so a 32x32 image ends at 8x8 before global average pooling.
    """
    blocks = (depth - 2) // 6
    images = keras.Input(shape=tuple(image_shape), name="images")
    x = keras.layers.Conv2D(base_width, 3, padding="same", use_bias=False)(images)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    for stage in range(3):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            x = _residual_block(x, base_width * 2 ** stage, stride)
    x = keras.layers.GlobalAveragePooling2D()(x)
    logits = keras.layers.Dense(num_classes, name="logits")(x)
    return keras.Model(images, logits, name=f"small_resnet{depth}")


def swin_tiny(image_shape, num_classes, **options):
    """Swin-T (moxlite.models.vision_transformers.swin); options override its sizes."""
    from moxlite.models import vision_transformers
    return vision_transformers.swin(image_shape, num_classes, **options)


def vit_tiny(image_shape, num_classes, **options):
    """ViT-Ti (moxlite.models.vision_transformers.vit); options override its sizes."""
    from moxlite.models import vision_transformers
    return vision_transformers.vit(image_shape, num_classes, **options)


NETWORKS = {"mlp": mlp, "lenet": lenet, "resnet50": resnet50, "small_resnet": small_resnet,
            "swin_tiny": swin_tiny, "vit_tiny": vit_tiny}
