"""How moxlite matches MoXing's public API documentation, one row per documented name.

The documentation is huaweicloud/ModelArts-Lab ``docs/moxing_api_doc/`` (the file API:
``MoXing_API_File_apidoc.md`` and ``MoXing_API_File.md``). Each ``Row`` is one function,
class, argument, mode, method, exception or documented case, with its status:

- ``same``: behaves as documented (the note may say how, e.g. on object storage);
- ``different``: works, but not exactly as documented: the note says what and why;
- ``refused``: raises a moxlite error; the note is that error's message;
- ``untested``: meant as documented, but no test shows it yet (a "same" row names its test in
  ``links.py`` beside this file).

Rows from several APIs live side by side: ``ROWS`` is the concatenation of the per-API
lists, ``API_MODULES`` names the moxlite module each API's names are looked up in, and
``resolve`` finds the object a row names. ``tools/conformance_table.py`` prints them as a
markdown table; ``tests/moxing/test_conformance_file.py`` checks the file rows against the module,
so the table cannot drift from the code. Import-light: nothing here imports TensorFlow.

Name conventions, by kind: ``function`` / ``class`` / ``exception``: the attribute
(``copy``); ``argument``: ``function(argument)`` (``copy(client_id)``); ``method`` /
``attribute``: ``Class.name`` (``File.size``); ``mode``: ``File(mode='r+')``; ``case``: a
call from the documentation's examples (``remove('s3://b/file/')``).
"""

import collections
import importlib
import inspect
import re

from conformance import links

STATUSES = ("same", "different", "refused", "untested")
KINDS = ("function", "class", "argument", "method", "attribute", "mode", "exception", "case")

Row = collections.namedtuple("Row", "api name kind status note test", defaults=("",))
Row.__doc__ = ("One documented name: which API, the name, its kind, same/different/refused/untested, why, "
               "and the test that shows it (conformance/links.py, beside this file).")

API_MODULES = {"mox.file": "moxlite.file"}

_FILE = "mox.file"


def _rows(api, entries):
    return [Row(api, *entry) for entry in entries]


_FILE_FUNCTIONS = [
    ("append", "function", "same", "as open(url, 'a').write(data); on object storage the object is "
     "rewritten whole, since S3 objects cannot grow"),
    ("append(url)", "argument", "same", ""),
    ("append(data)", "argument", "same", ""),
    ("append(binary)", "argument", "same", "str data is written as UTF-8 in either mode"),
    ("append_remote", "function", "same", "the content of src_url is added at the end of dst_url "
     "(made if missing); local paths work too"),
    ("append_remote(src_url)", "argument", "same", ""),
    ("append_remote(dst_url)", "argument", "different", "the documentation's parameter list spells it "
     "'dsturl', its example and every other function 'dst_url'; moxlite takes dst_url"),
    ("copy", "function", "same", "one file, in any direction (local, s3://, obs://), as shutil.copyfile"),
    ("copy(src_url)", "argument", "same", "a folder is IsADirectoryError naming copy_parallel"),
    ("copy(dst_url)", "argument", "same", ""),
    ("copy(client_id)", "argument", "different", "accepted and unused: it picks one of MoXing's OBS "
     "clients, and moxlite has one S3 client per setting"),
    ("copy('s3://b/file', '/existing/folder')", "case", "same", "the documentation leaves it open; "
     "shutil.copyfile, its named equivalent, raises IsADirectoryError, and so does moxlite, naming the "
     "file path to give, in every direction and before anything is written"),
    ("copy_parallel", "function", "same", "a folder tree, concurrently (shutil.copytree); returns the "
     "number of files copied"),
    ("copy_parallel(src_url)", "argument", "same", ""),
    ("copy_parallel(dst_url)", "argument", "same", ""),
    ("copy_parallel(file_list)", "argument", "same", "paths relative to src_url"),
    ("copy_parallel(threads)", "argument", "same", ""),
    ("copy_parallel(is_processing)", "argument", "different", "accepted; the copies always run on "
     "threads, since they wait on the network, not the CPU"),
    ("copy_parallel(use_queue)", "argument", "different", "accepted and unused: the thread pool "
     "already hands out one file at a time"),
    ("exists", "function", "same", "os.path.exists; a refused credential or dead endpoint raises "
     "instead of answering False"),
    ("exists(url)", "argument", "same", ""),
    ("get_size", "function", "same", "os.path.getsize; a folder gives the bytes of its files"),
    ("get_size(url)", "argument", "same", ""),
    ("get_size(recursive)", "argument", "same", "as documented, a local folder always counts its whole "
     "tree; an object-storage folder counts the objects right under it unless recursive=True"),
    ("glob", "function", "same", "glob.glob; s3:// patterns give s3:// paths"),
    ("glob(url)", "argument", "same", ""),
    ("is_directory", "function", "same", "os.path.isdir; on object storage a prefix with objects "
     "under it, or a folder marker"),
    ("is_directory(url)", "argument", "same", ""),
    ("list_directory", "function", "same", "os.listdir"),
    ("list_directory(url)", "argument", "same", ""),
    ("list_directory(recursive)", "argument", "same", "every relative path under the folder, files and "
     "folders; the documentation's 'local paths are always recursive' is copied from get_size and "
     "contradicts its own os.listdir mapping, which moxlite follows"),
    ("list_directory(remove_sep)", "argument", "same", "the documentation gives no default; moxlite's "
     "default, True, gives os.listdir's bare names, and remove_sep=False ends each folder's name with '/'"),
    ("list_directory(skip_file)", "argument", "same", "folders only"),
    ("list_directory(skip_dir)", "argument", "same", "files only"),
    ("make_dirs", "function", "same", "os.makedirs(exist_ok=True); on object storage an empty 'key/' "
     "folder marker"),
    ("make_dirs(url)", "argument", "same", ""),
    ("mk_dir", "function", "same", "os.mkdir; an existing path is FileExistsError"),
    ("mk_dir(url)", "argument", "same", ""),
    ("mk_dir('s3://b/missing/new')", "case", "same", "OSError (FileNotFoundError) when the parent folder "
     "does not exist, on object storage too"),
    ("read", "function", "same", "the whole file, str (UTF-8) or bytes"),
    ("read(url)", "argument", "same", ""),
    ("read(client_id)", "argument", "different", "accepted and unused: it picks one of MoXing's OBS "
     "clients, and moxlite has one S3 client per setting"),
    ("read(binary)", "argument", "same", ""),
    ("remove", "function", "same", "follows the documentation's table of cases below, on local paths "
     "too; a missing path is FileNotFoundError (os.remove); a bucket is never removed"),
    ("remove(url)", "argument", "same", ""),
    ("remove(recursive)", "argument", "same", ""),
    ("remove('s3://b/file')", "case", "same", "removes only the file"),
    ("remove('s3://b/file', recursive=True)", "case", "same", "removes only the file"),
    ("remove('s3://b/dir', recursive=True)", "case", "same", "removes only the folder tree (not "
     "'dir2' or an object named 'dir')"),
    ("remove('s3://b/dir/', recursive=True)", "case", "same", "removes only the folder tree"),
    ("remove('s3://b/file/')", "case", "same", "does nothing, with or without recursive (one warning "
     "line says why)"),
    ("remove('s3://b/dir')", "case", "same", "does nothing without recursive (one warning line says why)"),
    ("remove('s3://b/dir/')", "case", "same", "does nothing without recursive (one warning line says why)"),
    ("rename", "function", "same", "os.rename for a file or a folder; across local disk and object "
     "storage it is a copy, then a remove"),
    ("rename(src_url)", "argument", "same", ""),
    ("rename(dst_url)", "argument", "same", ""),
    ("scan_dir", "function", "same", "os.scandir: DirEntry objects with name, path, is_dir(), is_file(), "
     "stat()"),
    ("scan_dir(url)", "argument", "same", ""),
    ("set_auth", "function", "same", "settings for this process; arguments left None keep their value"),
    ("set_auth(ak)", "argument", "same", "the access key id"),
    ("set_auth(sk)", "argument", "same", "the secret access key"),
    ("set_auth(server)", "argument", "same", "a host or a full URL"),
    ("set_auth(port)", "argument", "same", ""),
    ("set_auth(is_secure)", "argument", "same", "https when True"),
    ("set_auth(ssl_verify)", "argument", "same", "False skips the certificate check"),
    ("set_auth(long_conn_mode)", "argument", "same", "TCP keep-alive on the pooled connections "
     "(botocore's tcp_keepalive); connections are always pooled"),
    ("set_auth(path_style)", "argument", "same", "True: botocore's addressing_style='path', False: "
     "'virtual'"),
    ("set_auth(retry)", "argument", "same", "attempts per request (botocore's total_max_attempts and s3fs's "
     "retry loop)"),
    ("set_auth(retry_wait)", "argument", "different", "accepted and kept, unused: botocore waits "
     "between attempts by its own exponential back-off and has no fixed wait"),
    ("set_auth(client_timeout)", "argument", "same", "seconds for botocore's connect_timeout and "
     "read_timeout"),
    ("set_auth(list_max_keys)", "argument", "different", "accepted and kept, unused: s3fs lists in the "
     "server's pages (1,000 keys) and has no page-size setting; results are complete either way"),
    ("stat", "function", "same", "os.stat's answer as .length, .mtime_nsec, .is_directory"),
    ("stat(src_url)", "argument", "same", ""),
    ("walk", "function", "same", "os.walk"),
    ("walk(url)", "argument", "same", ""),
    ("walk(topdown)", "argument", "same", "orders the triples on object storage too"),
    ("walk(onerror)", "argument", "same", "os.walk's on local paths; unused for s3, as documented"),
    ("walk(followlinks)", "argument", "same", "os.walk's on local paths; unused for s3, as documented"),
    ("write", "function", "same", "as open(url, 'w').write(data); parent folders are made"),
    ("write(url)", "argument", "same", ""),
    ("write(data)", "argument", "same", ""),
    ("write(binary)", "argument", "same", "str data is written as UTF-8 in either mode"),
]

_FILE_OBJECT = [
    ("File", "class", "same", "usable wherever Python wants a file: with, iteration, pandas, logging"),
    ("File(name)", "argument", "same", ""),
    ("File(mode)", "argument", "same", "Python's open modes; the letters may come in any order"),
    ("File(mode='r')", "mode", "same", "object storage: streamed from the server in 8 MiB requests"),
    ("File(mode='w')", "mode", "same", "object storage: written to a local spool; flush() and close() "
     "upload it whole, so what was flushed is on the server"),
    ("File(mode='a')", "mode", "same", "object storage: the spool starts as a copy of the object; "
     "writes go at the end; flush() and close() upload it whole"),
    ("File(mode='r+')", "mode", "same", "object storage: the object must exist; read, seek and write a "
     "local copy; flush() and close() upload it once something was written"),
    ("File(mode='w+')", "mode", "same", "object storage: as 'w', and readable"),
    ("File(mode='a+')", "mode", "same", "object storage: as 'a', and readable after a seek"),
    ("File(mode='br')", "mode", "same", "as 'r', bytes"),
    ("File(mode='bw')", "mode", "same", "as 'w', bytes"),
    ("File(mode='ba')", "mode", "same", "as 'a', bytes"),
    ("File(mode='br+')", "mode", "same", "as 'r+', bytes (MoXing_API_File.md also writes it 'rb+')"),
    ("File(mode='bw+')", "mode", "same", "as 'w+', bytes"),
    ("File(mode='ba+')", "mode", "same", "as 'a+', bytes"),
    ("File.close", "method", "same", "uploads a written spool once more; a second call does nothing"),
    ("File.flush", "method", "same", "on object storage uploads everything written so far"),
    ("File.mode", "attribute", "same", "the mode as given"),
    ("File.name", "attribute", "same", "the path as given"),
    ("File.read", "method", "same", ""),
    ("File.readable", "method", "same", ""),
    ("File.readline", "method", "same", ""),
    ("File.readlines", "method", "same", ""),
    ("File.seek", "method", "same", "in 'r' on object storage a seek outside the 8 MiB block read last fetches another block"),
    ("File.seekable", "method", "same", ""),
    ("File.size", "method", "same", "bytes in the file now, unflushed writes included"),
    ("File.tell", "method", "same", ""),
    ("File.writable", "method", "same", ""),
    ("File.write", "method", "same", "at the end in the append modes, as open"),
    ("File.writelines", "method", "same", ""),
]

_FILE_EXCEPTIONS = [
    ("MoxFileNameDuplicateException", "exception", "same", "copy_parallel to a local folder refuses, before "
     "copying anything, objects that cannot sit side by side on a disk ('a' and 'a/b'), and an existing "
     "local file in the way; the error is also FileExistsError"),
    ("MoxFileNotExistsException", "exception", "same", "every missing file, folder or bucket (stat, read, "
     "File, copy, ...); the error is also FileNotFoundError, and a MoxFileRespException with resp.status 404"),
    ("MoxFileReadException", "exception", "same", "a read that breaks off after 200 OK (File.read, "
     "readline, iteration, read); the error is also ConnectionError; resp.status is 200"),
    ("MoxFileRespException", "exception", "same", "an answer of 300 or more: a refused request is also "
     "PermissionError (403), a missing path also FileNotFoundError (404); resp has status, reason and "
     "code, where MoXing's held the OBS SDK's response"),
]

_FILE_SHIFT = [
    ("shift", "function", "same", "shift('os', 'mox') makes the Python calls of MoXing's table (open, "
     "os.listdir, os.path.exists, shutil.copytree, ...) accept s3:// and obs:// paths, which go to "
     "mox.file; local paths still go to Python's own; shift('mox', 'os') undoes it"),
]

FILE_ROWS = _rows(_FILE, _FILE_FUNCTIONS + _FILE_OBJECT + _FILE_EXCEPTIONS + _FILE_SHIFT)

FILE_ROWS = links.linked(FILE_ROWS)   # each row's test (the 'test' field)
ROWS = list(FILE_ROWS)

_ARGUMENT = re.compile(r"^(?P<owner>[\w.]+)\((?P<argument>\w+)\)$")


def resolve(row, overrides=None):
    """The object ``row`` names in its API's moxlite module (for ``argument``: the parameter).

    ``overrides`` maps a first name component to an object to look in instead (an open
    ``File`` for instance attributes). Kinds ``mode`` and ``case`` name behaviour, not
    objects: their owner is returned and their test checks them. Raises LookupError with
    what was missing.
    """
    root = importlib.import_module(API_MODULES[row.api])
    overrides = overrides or {}

    def lookup(dotted):
        first, *rest = dotted.split(".")
        value = overrides[first] if first in overrides else getattr(root, first, _MISSING)
        for part in rest:
            value = getattr(value, part, _MISSING) if value is not _MISSING else value
        if value is _MISSING:
            raise LookupError(f"{row.api}: {dotted} does not exist in {root.__name__}")
        return value

    if row.kind == "argument":
        match = _ARGUMENT.match(row.name)
        if match is None:
            raise LookupError(f"{row.api}: argument row {row.name!r} is not written 'function(argument)'")
        owner = lookup(match["owner"])
        parameters = inspect.signature(owner).parameters
        if match["argument"] not in parameters:
            raise LookupError(f"{row.api}: {match['owner']} takes no argument {match['argument']!r}")
        return parameters[match["argument"]]
    if row.kind in ("mode", "case"):
        return lookup(re.match(r"[\w.]+", row.name).group(0))
    return lookup(row.name)


_MISSING = object()


def counts(rows):
    """{api: {status: number of rows}} in the order the APIs first appear."""
    found = {}
    for row in rows:
        found.setdefault(row.api, dict.fromkeys(STATUSES, 0))[row.status] += 1
    return found


# The documented examples (Getting Started, the flowers, TFRecord and user-manual scripts),
# each ported as a script under tests/moxing_ports/ and run by a test that checks its result
# against numpy or MoXing's documented output: (port, source in ModelArts-Lab unless it names its
# repository, status, note).
EXAMPLES = [
    ("getting_started_train.py", "docs/moxing_api_doc/MoXing_API_GettingStarted.md", "same",
     "no batch_size, get_next() of a generator of 100-sample batches: 40 steps, until the data ends"),
    ("getting_started_eval.py", "docs/moxing_api_doc/MoXing_API_GettingStarted.md", "same",
     "EVAL over all 1,000 test samples, [VALIDATION METRICS] as documented"),
    ("modelarts_mox_flowers.py", "docs/moxing_api_doc/scripts/mox_flowers.py", "same",
     "zoo ResNet-50 on a raw image folder, piecewise learning rate"),
    ("modelarts_mox_flowers_advanced.py", "docs/moxing_api_doc/scripts/mox_flowers_advanced.py", "different",
     "fine-tuning from a checkpoint in fp16 with fp32 variables: its fixed loss scale 1024 overflows every step "
     "of the test's small data, and moxlite stops after max_consecutive_nonfinite in a row, where MoXing "
     "skipped every step and ended with the pretrained weights"),
    ("modelarts_train_iceberg.py", "official_examples/Using_MoXing_to_Create_a_Iceberg_Images_Classification_"
     "Application/codes/train_iceberg.py", "same", "TFRecords through tfrecord_common, TRAIN, EVAL, PREDICT "
     "with output_fn, on obs://"),
    ("modelarts_train_mnist_tf.py", "official_examples/Using_TensorFlow_to_Create_a_MNIST_Dataset_Recognition_"
     "Application/codes/train_mnist_tf.py", "same", "mox.file.copy_parallel in both directions"),
    ("moxing_doc_early_stopping.py", "docs/moxing_api_doc/MoXing_API_UserInstructions.md", "same",
     "EarlyStoppingHook stops where the documented rule says"),
    ("moxing_doc_predict_output_fn.py", "docs/moxing_api_doc/MoXing_API_UserInstructions.md", "same",
     "PREDICT with output_fn"),
    ("moxing_doc_export_tf_serving.py", "docs/moxing_api_doc/MoXing_API_UserInstructions.md", "different",
     "export goes to log_dir/model/<version> where the documentation says log_dir/<version>; ExportSpec "
     "takes the model's inputs, not tensors computed inside model_fn"),
    ("moxing_doc_resnet50_basic.py", "docs/moxing_api_doc/MoXing_API_UserInstructions.md", "same",
     "the basic program"),
    ("modelarts_train_mnist_moxing.py", "official_examples/Using_MoXing_to_Create_a_MNIST_Dataset_Recognition_"
     "Application/codes/train_mnist.py", "same", "auto_batch=False batches of a generator, 1,000 steps, export "
     "version 'model'"),
    ("modelarts_notebook_mnist_train.py", "best_practices/Using_Notebook_to_Create_a_MNIST_Dataset_Recognition_"
     "Application/code/mnist_example.ipynb", "same", "copy_parallel from OBS, 1,000 steps, export"),
    ("modelarts_notebook_mnist_predict.py", "best_practices/Using_Notebook_to_Create_a_MNIST_Dataset_Recognition_"
     "Application/code/mnist_example.ipynb", "same", "one [784] image with batch_size=1, auto_batch=False: one "
     "prediction"),
    ("modelarts_train_iceberg_with_cache.py", "xinglihua2/modelarts-example: Using MoXing to Create a Iceberg "
     "Images Classification Application/codes/train_iceberg_with_cache.py", "same", "the script's own --log_dir; "
     "the local cache copied back to OBS by an atexit handler"),
    ("moxing_doc_keras_multi_io.py", "docs/moxing_api_doc/MoXing_API_UserInstructions.md", "refused",
     "input_fn returns single random samples as tensors of lengths 100, 5, 1, 1 (auto_batch=True); moxlite cuts "
     "tensors into samples along their first dimension: 'it must return a tf.data.Dataset or arrays of equal "
     "length (Dimensions 100 and 5 are not compatible)'"),
    ("moxing_doc_keras_model_from_json.py", "docs/moxing_api_doc/MoXing_API_UserInstructions.md", "refused",
     "the same input_fn as moxing_doc_keras_multi_io.py, the same message"),
    ("moxing_doc_lars_resnet50.py", "docs/moxing_api_doc/MoXing_API_MoreExamples.md", "same",
     "lars under batch_gradients; the tf.cond warm-up rate of the global step follows it, update by update"),
    ("moxing_doc_dgc_resnet50.py", "docs/moxing_api_doc/MoXing_API_MoreExamples.md", "different",
     "the script's epoch-string rate (tf.cond of warm-up and piecewise_constant) follows the step, export and "
     "EVAL as documented; deep gradient compression itself is not in moxlite: run() warns that --variable_update "
     "and each --dgc_* flag are ignored, one line each"),
    ("moxing_doc_introduction_mnist.py", "docs/moxing_api_doc/MoXing_API_Introduction.md", "same",
     "no batch_size, an endless generator, max_number_of_steps=1000"),
    ("moxing_doc_compare_native_mnist.py", "docs/moxing_api_doc/obsolete/MoXing_API.md", "same",
     "log_dir from MoXing's own --train_url; the port imports moxlite before its first flag read"),
    ("moxing_doc_transfer_learning_raw.py", "docs/moxing_api_doc/obsolete/MoXing_API.md", "same",
     "a raw data set batched by itself (auto_batch=False), warm start without logits, fp16 with a fixed loss scale"),
]
