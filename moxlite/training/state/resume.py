"""Restore a training run's checkpoint and give back a trainer that goes on from it.

On one device (no distributed iterator) the checkpoint holds the input
position too, unless input_fn's pipeline cannot save one; then, and on several
replicas or workers, a resumed run replays input_fn from its beginning and
skips the batches already trained on. A parameter-server run skips nothing:
its workers read their own input.
"""

from moxlite.training.state import checkpoints
from moxlite.training.state import input_resume


def restore_and_resume(config, global_step, make_trainer, make_checkpointer, iterator_checkpointable, async_mode):
    """(trainer, checkpointer) after restoring ``config``'s log_dir or checkpoint_path.

    make_trainer(skip_steps): a new trainer whose input skips that many batches.
    make_checkpointer(iterator): the run's Checkpointer, saving ``iterator``'s position (None: none).
    """
    trainer = make_trainer(skip_steps=0) if iterator_checkpointable else None
    # Without a log_dir nothing is saved, so there is nothing to probe or to say.
    unsavable = trainer is not None and config.log_dir and input_resume.position_unsavable(trainer.iterator)
    if unsavable:
        input_resume.report_unsaved_position(unsavable)
    if trainer is not None and not unsavable:
        checkpointer = make_checkpointer(trainer.iterator)
        source = checkpointer.restore(config.checkpoint_path, config.checkpoint_exclude_patterns)

        def restarted_trainer():
            fresh = make_trainer(skip_steps=0)
            checkpointer.replace_iterator(fresh.iterator)
            return fresh

        if checkpointer.iterator_mismatch is not None:
            input_resume.restart_or_stop(source, int(global_step.numpy()), checkpointer.iterator_mismatch,
                                         config.allow_input_restart)
            trainer.close()
            trainer = restarted_trainer()
        elif source and source == checkpoints.latest_checkpoint(config.log_dir):
            trainer = input_resume.RestartingTrainer(trainer, global_step, restarted_trainer, source,
                                                     config.allow_input_restart)
        return trainer, checkpointer
    checkpointer = make_checkpointer(None)
    source = checkpointer.restore(config.checkpoint_path, config.checkpoint_exclude_patterns)
    resumed = int(global_step.numpy()) if source and checkpoints.latest_checkpoint(config.log_dir) == source else 0
    if trainer is None or resumed:
        if trainer is not None:
            trainer.close()
        trainer = make_trainer(skip_steps=0 if async_mode else resumed)
    return trainer, checkpointer
