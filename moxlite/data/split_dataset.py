"""MoXing's ``split_image_classification_dataset``: one class-folder tree split into ``train``/``eval`` trees.

``split_image_classification_dataset(split_spec={'train': 0.9, 'eval': 0.1},
src_dir=..., dst_dir=..., overwrite=False)`` writes ``dst_dir/<split>/<class>/<file>``
for every split, as in MoXing's flowers example. Paths may be local or on object
storage (copied through ``mox.file``).

What MoXing's documentation leaves open, and how moxlite decides it:
- Each class is split on its own (every split keeps every class): its images,
  sorted by name, are shuffled with ``seed`` (0), and split ``i`` takes
  ``round(fraction_i * n)`` of them, in ``split_spec``'s order; the last split takes
  the rest, so no image is lost or copied twice.
- Fractions must be positive and sum to 1 (within 1e-6).
- ``overwrite=False`` and a split folder that already holds files: nothing is
  copied for that split (a line says so); ``overwrite=True`` empties it first.
Returns ``{split: number of images}``.
"""

import random

from moxlite import errors, logs
from moxlite import file as mox_file
from moxlite.data.sources import IMAGE_EXTENSIONS


def _join(*parts):
    return "/".join([parts[0].rstrip("/")] + [part.strip("/") for part in parts[1:]])


def _check_spec(split_spec):
    if not isinstance(split_spec, dict) or not split_spec:
        raise errors.ArgumentError(
            f"split_image_classification_dataset: split_spec={errors.describe(split_spec)} must be a dict "
            "{split name: fraction}, e.g. {'train': 0.9, 'eval': 0.1}")
    bad = {name: value for name, value in split_spec.items()
           if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0}
    if bad or abs(sum(split_spec.values()) - 1.0) > 1e-6:
        raise errors.ArgumentError(
            f"split_image_classification_dataset: split_spec={split_spec} must hold positive fractions summing to 1")


def _assign(files, split_spec, seed):
    files = sorted(files)
    random.Random(seed).shuffle(files)
    names = list(split_spec)
    parts, start = {}, 0
    for index, name in enumerate(names):
        count = len(files) - start if index == len(names) - 1 else int(round(split_spec[name] * len(files)))
        count = max(0, min(count, len(files) - start))
        parts[name] = files[start:start + count]
        start += count
    return parts


def split_image_classification_dataset(split_spec, src_dir, dst_dir, overwrite=False, seed=0):
    """Copy ``src_dir/<class>/<image>`` into ``dst_dir/<split>/<class>/<image>`` by ``split_spec``'s fractions."""
    _check_spec(split_spec)
    if not mox_file.is_directory(src_dir):
        raise errors.ArgumentError(
            f"split_image_classification_dataset: src_dir={src_dir!r} is not a folder; give a folder with "
            "one sub-folder of images per class")
    classes = sorted(name.rstrip("/") for name in mox_file.list_directory(src_dir)
                     if mox_file.is_directory(_join(src_dir, name)))
    if not classes:
        raise errors.ArgumentError(f"split_image_classification_dataset: {src_dir!r} has no class sub-folder")
    logger = logs.get_logger()
    skip = set()
    for split in split_spec:
        target = _join(dst_dir, split)
        if mox_file.exists(target) and mox_file.list_directory(target):
            if overwrite:
                mox_file.remove(target, recursive=True)
            else:
                logger.info("split_image_classification_dataset: %s already holds files; kept (overwrite=False)",
                            target)
                skip.add(split)
    counts = dict.fromkeys(split_spec, 0)
    for label in classes:
        folder = _join(src_dir, label)
        images = [name for name in mox_file.list_directory(folder) if name.lower().endswith(IMAGE_EXTENSIONS)]
        for split, names in _assign(images, split_spec, seed).items():
            counts[split] += len(names)
            if split in skip:
                continue
            mox_file.make_dirs(_join(dst_dir, split, label))
            for name in names:
                mox_file.copy(_join(folder, name), _join(dst_dir, split, label, name))
    logger.info("split_image_classification_dataset: %s -> %s: %s", src_dir, dst_dir,
                ", ".join(f"{split} {count}" for split, count in counts.items()))
    return counts
