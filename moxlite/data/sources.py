"""Where the built-in data sets read from, checked without TensorFlow.

The tfrecord and image_folder data sets list their files here; the recipe
loader runs the same checks (``check_files``) before TensorFlow is imported,
so a recipe pointing at missing files is rejected in a fraction of a second.
"""

import glob
import os

from moxlite import errors

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")


class DataOptionError(errors.ArgumentError):
    """A data-set option is wrong; ``option`` names it so a recipe can point at its line."""

    def __init__(self, option, message):
        super().__init__(f"{option}: {message}")
        self.option = option
        self.detail = message


def tfrecord_files(patterns, option):
    """The sorted files the glob ``patterns`` match; DataOptionError naming ``option`` if none."""
    files = sorted({path for pattern in patterns for path in glob.glob(pattern)})
    if not files:
        shown = ", ".join(patterns) if patterns else "nothing"
        raise DataOptionError(option, f"{shown} match no file; give glob patterns of TFRecord files")
    return files


def list_images(directory, class_names, option):
    """(paths, labels) of the images in the class sub-folders of ``directory`` (label = index in class_names)."""
    paths, labels = [], []
    for label, name in enumerate(class_names):
        folder = os.path.join(directory, name)
        if not os.path.isdir(folder):
            continue
        for file_name in sorted(os.listdir(folder)):
            if file_name.lower().endswith(IMAGE_EXTENSIONS):
                paths.append(os.path.join(folder, file_name))
                labels.append(label)
    if not paths:
        raise DataOptionError(option, f"{directory!r} holds no {'/'.join(IMAGE_EXTENSIONS)} image in its class folders")
    return paths, labels


def class_folders(directory, option="train_dir"):
    """The sorted class sub-folder names of ``directory``."""
    if not directory or not os.path.isdir(directory):
        raise DataOptionError(option, f"{directory!r} is not a directory; give a folder with one sub-folder per class")
    names = sorted(n for n in os.listdir(directory) if os.path.isdir(os.path.join(directory, n)))
    if not names:
        raise DataOptionError(option, f"{directory!r} has no class sub-folders")
    return names


def image_folder_classes(train_dir, eval_dir):
    """The class names of ``train_dir``; the class folders of ``eval_dir`` must be among them."""
    class_names = class_folders(train_dir, "train_dir")
    unknown = sorted(set(class_folders(eval_dir, "eval_dir")) - set(class_names))
    if unknown:
        raise DataOptionError("eval_dir", f"class folders {unknown} are not in train_dir {train_dir!r}")
    return class_names


def check_files(name, options):
    """For data set ``name`` with recipe ``options``: its files exist (DataOptionError naming the option)."""
    if name == "tfrecord":
        tfrecord_files(options["train_files"], "train_files")
        tfrecord_files(options["eval_files"], "eval_files")
    elif name == "image_folder":
        image_folder_classes(options["train_dir"], options["eval_dir"])
