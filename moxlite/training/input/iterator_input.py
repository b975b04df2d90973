"""The data behind tensors that ``input_fn`` read from a ``tf.data`` iterator.

MoXing's TF1 scripts end ``input_fn`` with
``return tf.compat.v1.data.make_one_shot_iterator(ds).get_next()``. In TF1 those were
symbolic tensors: every step ran ``get_next`` again, until the data set ended. Eagerly,
``get_next()`` returns the first element's values, and only the iterator knows the rest.
``read_on`` finds the iterator that produced the returned tensors. It gives back a data
set of that first element followed by the rest of the same iterator. A generator behind
the data set is therefore read once, in MoXing's order. Tensors that are computed from an
iterator's element do not say how the next elements would be made, so moxlite refuses
them with one line. It never takes the first element for the whole input.
"""

import weakref

import tensorflow as tf

from moxlite import errors

# dataset made by read_on -> its first element, the tensors input_fn returned (already read).
_FIRST_ELEMENTS = weakref.WeakKeyDictionary()


def first_element(dataset):
    """The first element of a dataset ``read_on`` made (already read from its iterator), or None."""
    try:
        return _FIRST_ELEMENTS.get(dataset)
    except TypeError:   # not weakly referenceable: not one of ours
        return None


class _ReadOn:
    """Generator function: the element input_fn read, then the rest of its iterator, once."""

    def __init__(self, iterator, first):
        self._iterator = iterator
        self._pending = [first]

    def __call__(self):
        while self._pending:
            yield self._pending.pop()
        yield from self._iterator


def _structure(produced):
    return tuple(produced) if isinstance(produced, list) else produced


def read_on(produced, reads, mode):
    """A ``tf.data.Dataset`` of what ``produced`` stands for, given input_fn's iterator ``reads``.

    ``reads``: the (iterator, element) pairs recorded while input_fn ran
    (``compat.iterator_reads``). Returns None when nothing was read, or when only numpy
    arrays came back; raises ArgumentError when the returned tensors come partly or
    indirectly from an iterator (or from anywhere else after one was read: eagerly,
    moxlite cannot tell).
    """
    structure = _structure(produced)
    leaves = tf.nest.flatten(structure)
    if not tf.executing_eagerly() and _reads_an_iterator(tf.compat.v1.get_default_graph()):
        raise errors.ArgumentError(
            f"input_fn read a tf.data iterator in mode {mode} while traced (each parameter-server worker "
            f"traces input_fn), where moxlite cannot read the iterator on; return the tf.data.Dataset itself")
    for iterator, element in reads:
        positions = {id(component): index for index, component in enumerate(tf.nest.flatten(element))}
        if leaves and all(id(leaf) in positions for leaf in leaves):
            dataset = _selected(iterator, element, structure, [positions[id(leaf)] for leaf in leaves])
            _FIRST_ELEMENTS[dataset] = structure
            return dataset
    if not reads or not any(tf.is_tensor(leaf) for leaf in leaves):
        return None   # numpy arrays are the whole data set, even if input_fn read an iterator on the way
    from_reads = {id(component) for _, element in reads for component in tf.nest.flatten(element)}
    found = sum(id(leaf) in from_reads for leaf in leaves)
    how = (f"only {found} of the {len(leaves)} returned tensors are; the others were computed from it or read "
           f"by another get_next()" if found else "they were computed from the element get_next() returned")
    raise errors.ArgumentError(
        f"input_fn read a tf.data iterator in mode {mode} and returned tensors that are not that "
        f"iterator's element ({how}), so moxlite cannot tell what the next batches are; return "
        f"get_next()'s tensors unchanged, or the tf.data.Dataset itself with the computation in "
        f"dataset.map(...)")


def _reads_an_iterator(graph):
    return any(op.type.startswith("IteratorGetNext") for op in graph.get_operations())


def _selected(iterator, element, structure, positions):
    dataset = tf.data.Dataset.from_generator(_ReadOn(iterator, element), output_signature=iterator.element_spec)
    whole = list(range(len(tf.nest.flatten(element))))
    if positions == whole and tf.nest.is_nested(structure) == tf.nest.is_nested(element):
        try:
            tf.nest.assert_same_structure(structure, element)
            return dataset
        except (TypeError, ValueError):
            pass

    def select(*components):
        flat = tf.nest.flatten(components[0] if len(components) == 1 else components)
        return tf.nest.pack_sequence_as(structure, [flat[index] for index in positions])

    return dataset.map(select)
