"""Where the built-in data sets read from, checked without TensorFlow.

The tfrecord and image_folder data sets list their files here; the recipe
loader runs the same checks (``check_files``) before TensorFlow is imported,
so a recipe pointing at missing, empty or mislabelled files is rejected in a
fraction of a second. What can be told from a file's first bytes is told here:
a TFRecord file starts with a record header whose length carries a CRC-32C,
and JPEG, PNG, BMP and GIF files start with their signatures. Decoding the
first records needs TensorFlow and is ``moxlite.data.probe``'s job.
"""

import glob
import os

from moxlite import errors

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
# The formats tf.io.decode_image reads, by the bytes their files start with.
IMAGE_SIGNATURES = ((b"\xff\xd8\xff", "JPEG"), (b"\x89PNG\r\n\x1a\n", "PNG"), (b"BM", "BMP"),
                    (b"GIF87a", "GIF"), (b"GIF89a", "GIF"))
IMAGE_FORMATS = "a JPEG, PNG, BMP or GIF image"
# Images whose first bytes are looked at in each class folder (all would mean reading every file).
HEADER_PROBES_PER_CLASS = 2
TFRECORD_HEADER_BYTES = 12   # uint64 length, then the masked CRC-32C of those 8 bytes


class DataOptionError(errors.ArgumentError):
    """A data-set option is wrong; ``option`` names it so a recipe can point at its line."""

    def __init__(self, option, message):
        super().__init__(f"{option}: {message}")
        self.option = option
        self.detail = message


# ----------------------------------------------------------------- first bytes

def _crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C_TABLE = []   # filled on first use: importing the recipe loader stays as fast as it was


def crc32c(data):
    """CRC-32C (Castagnoli) of ``data``, as TFRecord files use it (only ever run on a few bytes)."""
    if not _CRC32C_TABLE:
        _CRC32C_TABLE.extend(_crc32c_table())
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data):
    """The masked CRC a TFRecord header stores (TensorFlow's core/lib/hash/crc32c.h Mask)."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord_header_problem(head):
    """None when ``head`` (a file's first 12 bytes or fewer) starts a TFRecord file; else what is wrong."""
    if not head:
        return "is empty; expected a TFRecord file of tf.train.Example records (tf.io.TFRecordWriter)"
    if len(head) < TFRECORD_HEADER_BYTES or masked_crc32c(head[:8]) != int.from_bytes(head[8:12], "little"):
        return (f"is not a TFRecord file (it starts with {bytes(head[:8])!r}, not a record header); expected "
                f"files of tf.train.Example records written by tf.io.TFRecordWriter, uncompressed")
    return None


def image_header_problem(head):
    """None when ``head`` (a file's first bytes) starts an image tf.io.decode_image reads; else what is wrong."""
    if not head:
        return f"is empty; expected {IMAGE_FORMATS}"
    if any(head.startswith(signature) for signature, _ in IMAGE_SIGNATURES):
        return None
    return f"is not {IMAGE_FORMATS} (it starts with {bytes(head[:8])!r})"


def is_remote(pattern):
    """True for an object-storage path or pattern (obs://, s3://), read through moxlite.file."""
    return "://" in pattern


def match_files(patterns):
    """The sorted paths the glob ``patterns`` match (object-storage patterns through moxlite.file)."""
    found = set()
    for pattern in patterns:
        if is_remote(pattern):
            from moxlite import file as mox_file

            found.update(mox_file.glob(pattern))
        else:
            found.update(glob.glob(pattern))
    return sorted(found)


def head(path, size):
    """The first ``size`` bytes of the file ``path`` (of an object: only those bytes are fetched)."""
    if is_remote(path):
        from moxlite import file as mox_file

        with mox_file.File(path, "rb") as handle:
            return handle.read(size)
    with open(path, "rb") as handle:
        return handle.read(size)


def checked_files(patterns, option, kind, example, probe_bytes, header_problem, remote=False):
    """The sorted files the glob ``patterns`` match, each passing ``header_problem`` on its first bytes.

    kind: what the files hold, for the messages ("TFRecord files"); example: the glob
    suggested inside a directory that was given ('*'); probe_bytes: how many first bytes
    ``header_problem`` reads (it returns None or what is wrong); remote: object-storage
    patterns are matched too. Otherwise a DataOptionError naming ``option``.
    """
    files = match_files(patterns) if remote else sorted({path for pattern in patterns for path in glob.glob(pattern)})
    if not files:
        where = " (local or obs://)" if remote else ""
        if not patterns:
            raise DataOptionError(option, f"no files are given; give glob patterns of {kind}{where}")
        raise DataOptionError(option, f"{', '.join(patterns)} match no file; give glob patterns of {kind}{where}")
    for path in files:
        if not is_remote(path) and os.path.isdir(path):
            raise DataOptionError(option, f"{path!r} is a directory; give glob patterns of the {kind} in it, e.g. "
                                          f"{os.path.join(path, example)!r}")
        problem = header_problem(head(path, probe_bytes))
        if problem:
            raise DataOptionError(option, f"{path!r} {problem}")
    return files


# ----------------------------------------------------------------- TFRecord files

def tfrecord_files(patterns, option):
    """The sorted files the glob ``patterns`` match, each starting a TFRecord; DataOptionError naming ``option``."""
    return checked_files(patterns, option, "TFRecord files", "*", TFRECORD_HEADER_BYTES, tfrecord_header_problem)


def check_class_count(num_classes, allow_single_class, option, subject):
    """A classifier needs two classes; one (or none) only when ``allow_single_class`` says it is meant.

    ``subject`` starts the message: what holds too few classes."""
    if num_classes < 2 and not allow_single_class:
        raise DataOptionError(option, f"{subject}; a classifier needs at least 2 classes: add classes, or set "
                                      f"allow_single_class if one class is meant")


def tfrecord_inputs(train_files, eval_files, num_classes, allow_single_class=False):
    """(train paths, eval paths) of a tfrecord data set, checked as far as their first bytes tell."""
    check_class_count(num_classes, allow_single_class, "num_classes", f"{num_classes}")
    return tfrecord_files(train_files, "train_files"), tfrecord_files(eval_files, "eval_files")


# ----------------------------------------------------------------- image folders

def list_images(directory, class_names, option):
    """(paths, labels) of the images in the class sub-folders of ``directory`` (label = index in class_names).

    Every class folder present must hold an image: an empty one is a class the
    model would be asked to learn (or be scored on) without a single sample.
    """
    paths, labels = [], []
    for label, name in enumerate(class_names):
        folder = os.path.join(directory, name)
        if not os.path.isdir(folder):
            continue
        found = [os.path.join(folder, file_name) for file_name in sorted(os.listdir(folder))
                 if file_name.lower().endswith(IMAGE_EXTENSIONS)
                 and not os.path.isdir(os.path.join(folder, file_name))]
        if not found:
            raise DataOptionError(option, f"class folder {folder!r} holds no {'/'.join(IMAGE_EXTENSIONS)} image; add "
                                          f"images or remove the folder")
        paths.extend(found)
        labels.extend([label] * len(found))
    if not paths:
        raise DataOptionError(option, f"{directory!r} holds no {'/'.join(IMAGE_EXTENSIONS)} image in its class folders")
    return paths, labels


def check_image_headers(paths, labels, option, read=head, per_class=HEADER_PROBES_PER_CLASS):
    """The first ``per_class`` images of each class start like an image (``read(path, n)`` gives bytes)."""
    seen = {}
    for path, label in zip(paths, labels):
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > per_class:
            continue
        problem = image_header_problem(read(path, 8))
        if problem:
            raise DataOptionError(option, f"{path!r} {problem}; replace it, or move it out of the class folder")


def class_folders(directory, option="train_dir"):
    """The sorted class sub-folder names of ``directory``."""
    if not directory or not os.path.isdir(directory):
        raise DataOptionError(option, f"{directory!r} is not a directory; give a folder with one sub-folder per class")
    names = sorted(n for n in os.listdir(directory) if os.path.isdir(os.path.join(directory, n)))
    if not names:
        raise DataOptionError(option, f"{directory!r} has no class sub-folders")
    return names


def image_folder_classes(train_dir, eval_dir, allow_single_class=False):
    """The class names of ``train_dir``; the class folders of ``eval_dir`` must be among them."""
    class_names = class_folders(train_dir, "train_dir")
    unknown = sorted(set(class_folders(eval_dir, "eval_dir")) - set(class_names))
    if unknown:
        raise DataOptionError("eval_dir", f"class folders {unknown} are not in train_dir {train_dir!r}")
    check_class_count(len(class_names), allow_single_class, "train_dir",
                      f"{train_dir!r} has {len(class_names)} class folder ({class_names[0]!r})")
    return class_names


def image_folder_inputs(train_dir, eval_dir, allow_single_class=False):
    """(class names, (train paths, labels), (eval paths, labels)) of an image_folder data set, checked."""
    class_names = image_folder_classes(train_dir, eval_dir, allow_single_class)
    splits = []
    for directory, option in ((train_dir, "train_dir"), (eval_dir, "eval_dir")):
        paths, labels = list_images(directory, class_names, option)
        check_image_headers(paths, labels, option)
        splits.append((paths, labels))
    return class_names, splits[0], splits[1]


def check_files(name, options):
    """For data set ``name`` with recipe ``options``: its files exist and start as they should, and
    the text data sets' options agree (DataOptionError naming the option)."""
    if name == "tfrecord":
        tfrecord_inputs(options["train_files"], options["eval_files"], options.get("num_classes", 2),
                        options.get("allow_single_class", False))
    elif name == "image_folder":
        image_folder_inputs(options["train_dir"], options["eval_dir"], options.get("allow_single_class", False))
    elif name in ("text", "bert_tfrecord", "bert_synthetic"):
        from moxlite.data import text_checks   # imports this module: imported here, where it is used

        text_checks.check_files(name, options)
