"""Which trainable variables each optimizer updates, in the order its slots are saved."""

from moxlite import errors
from moxlite.training.state import checkpoints
from moxlite.training.state import checkpoint_keys


def variable_lists(template, spec, trainable_exclude_patterns, logger):
    """One list of variables per optimizer, each sorted by checkpoint key: Keras saves slots
    (momentum, Adam moments, accumulators) by position, so the order must not depend on the
    order model_fn created the variables."""
    lists = _in_creation_order(template, spec, trainable_exclude_patterns, logger)
    return [template.slot_order(variables) for variables in lists]


def _in_creation_order(template, spec, trainable_exclude_patterns, logger):
    """Trainable variables per loss, matched by their checkpoint names (``checkpoints.matches``:
    whole path components, wherever they stand), each setting's matches said in one line."""
    keys = {id(v): key for key, v in template.checkpoint_keys()[0].items()}

    def name_of(variable):
        return keys.get(id(variable)) or checkpoint_keys.variable_name(variable)

    trainable = template.trainable_variables + [v for v in template.external_variables if v.trainable]
    excluded = checkpoints.split_patterns(trainable_exclude_patterns)
    if excluded:
        logger.info(checkpoints.describe_matches("trainable_exclude_patterns (not trained)",
                                                 checkpoints.matched_names([name_of(v) for v in trainable], excluded)))
    trainable = [v for v in trainable if not checkpoints.matches_any(name_of(v), excluded)]
    if spec.var_scopes is None:
        return [trainable]
    per_loss = list(spec.var_scopes)
    if len(spec.losses) == 1 and all(isinstance(s, str) for s in per_loss):
        per_loss = [per_loss]   # one loss: var_scopes may be its list of scopes
    names = [name_of(v) for v in trainable]
    lists = []
    for index, scopes in enumerate(per_loss):
        scopes = [scopes] if isinstance(scopes, str) else list(scopes)
        matched = checkpoints.matched_names(names, scopes)
        for scope, found in matched.items():
            if not found:
                raise errors.ModelFnError(
                    f"var_scopes[{index}] scope {scope!r} matches no trainable variable; variable names are "
                    f"{names[:20]}{' ...' if len(names) > 20 else ''} (a scope matches whole name components)")
        logger.info(checkpoints.describe_matches(f"var_scopes[{index}] (trained by loss {index})", matched))
        lists.append([v for v, name in zip(trainable, names) if checkpoints.matches_any(name, scopes)])
    return lists
