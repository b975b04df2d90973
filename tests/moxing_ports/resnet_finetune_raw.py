"""ResNet-50 fine-tuning from a raw image folder: MoXing's documented transfer-learning script.

A folder of class sub-folders is read with ImageClassificationRawMetadata/Dataset
and the network's standard augmentation; resnet_v1_50 from the zoo is warm-started
from a pretrained checkpoint without global_step and the logits (get_model_meta's
pattern), trained in fp16 with fp32 variables (var_scope, a fixed loss scale set by
set_flag) with a TF1 momentum optimizer on MoXing's piecewise learning rate, then
exported for serving.

Ported from a moxing.tensorflow script. What changed, and nothing else:
  import moxing.tensorflow as mox             -> import moxlite as mox
  moxing.tensorflow.optimizer                 -> moxlite.optimizer
  tf.flags / tf.app.run                       -> tf.compat.v1.flags / tf.compat.v1.app.run
  tf.train.MomentumOptimizer                  -> tf.compat.v1.train.MomentumOptimizer
  slim.one_hot_encoding                       -> tf.one_hot
  tf.losses.softmax_cross_entropy             -> tf.compat.v1.losses.softmax_cross_entropy
  tf.GraphKeys / tf.nn.in_top_k               -> tf.compat.v1.GraphKeys / tf.compat.v1.nn.in_top_k
  sys.maxint                                  -> sys.maxsize
  images = tf.cast(images, tf.float16)        -> images_fp16 = ... (ExportSpec names the input model_fn
                                                 received, not a tensor computed from it)
Added for a small, fast run here: --image_size (MoXing used the network's 224)
and --max_steps (MoXing let num_epochs end the run).
"""

import sys

import tensorflow as tf

import moxlite as mox
from moxlite.optimizer import learning_rate_scheduler

tf.compat.v1.flags.DEFINE_string("data_url", None, "Necessary. dataset dir")
tf.compat.v1.flags.DEFINE_string("model_name", "resnet_v1_50", "Necessary. model_name")
tf.compat.v1.flags.DEFINE_string("train_url", None, "Optional. train_dir")
tf.compat.v1.flags.DEFINE_string("checkpoint_url", None, "Optional. checkpoint path")
tf.compat.v1.flags.DEFINE_integer("batch_size", 64, "Necessary. batch size")
tf.compat.v1.flags.DEFINE_integer("image_size", None, "Optional. input size (default: the network's)")
tf.compat.v1.flags.DEFINE_integer("max_steps", sys.maxsize, "Optional. steps to train")

flags = tf.compat.v1.flags.FLAGS


def main(*args, **kwargs):
    num_gpus = mox.get_flag("num_gpus")
    num_workers = len(mox.get_flag("worker_hosts").split(","))

    exclude_list = ["global_step"]
    model_meta = mox.get_model_meta(flags.model_name)
    exclude_list.append(model_meta.default_logits_pattern)
    checkpoint_exclude_patterns = ",".join(exclude_list)
    mox.set_flag("checkpoint_exclude_patterns", checkpoint_exclude_patterns)

    data_meta = mox.ImageClassificationRawMetadata(base_dir=flags.data_url)
    image_size = flags.image_size or model_meta.default_image_size

    mox.set_flag("loss_scale", 1024.0)

    def input_fn(mode, **kwargs):
        data_augmentation_fn = mox.get_data_augmentation_fn(name=flags.model_name, run_mode=mode,
                                                            output_height=image_size, output_width=image_size)
        dataset = mox.ImageClassificationRawDataset(data_meta,
                                                    batch_size=flags.batch_size,
                                                    num_epochs=20,
                                                    augmentation_fn=data_augmentation_fn,
                                                    reader_class=mox.AsyncRawGenerator)
        images, labels = dataset.get(["image", "label"])
        return images, labels

    def model_fn(inputs, mode, **kwargs):
        images, labels = inputs

        mox_model_fn = mox.get_model_fn(
            name=flags.model_name,
            run_mode=mode,
            num_classes=data_meta.num_classes,
            weight_decay=0.00004,
            data_format="NCHW",
            batch_norm_fused=True)

        images_fp16 = tf.cast(images, tf.float16)
        with mox.var_scope(force_dtype=tf.float32):
            logits, _ = mox_model_fn(images_fp16)

        labels_one_hot = tf.one_hot(labels, data_meta.num_classes)
        loss = tf.compat.v1.losses.softmax_cross_entropy(labels_one_hot, logits=logits)

        regularization_losses = mox.get_collection(tf.compat.v1.GraphKeys.REGULARIZATION_LOSSES)
        regularization_loss = tf.add_n(regularization_losses)
        loss = loss + regularization_loss

        logits_fp32 = tf.cast(logits, tf.float32)
        accuracy = tf.reduce_mean(tf.cast(tf.compat.v1.nn.in_top_k(logits_fp32, labels, 1), tf.float32))

        export_spec = mox.ExportSpec(inputs_dict={"images": images},
                                     outputs_dict={"logits": logits_fp32},
                                     version="model")

        return mox.ModelSpec(loss=loss,
                             log_info={"loss": loss, "accuracy": accuracy},
                             export_spec=export_spec)

    def optimizer_fn():
        lr = learning_rate_scheduler.piecewise_lr("10:0.01,20:0.001",
                                                  num_samples=data_meta.total_num_samples,
                                                  global_batch_size=flags.batch_size * num_gpus * num_workers)
        opt = tf.compat.v1.train.MomentumOptimizer(learning_rate=lr, momentum=0.9)
        return opt

    mox.run(input_fn=input_fn,
            model_fn=model_fn,
            optimizer_fn=optimizer_fn,
            run_mode=mox.ModeKeys.TRAIN,
            log_dir=flags.train_url,
            batch_size=flags.batch_size,
            auto_batch=False,
            checkpoint_path=flags.checkpoint_url,
            max_number_of_steps=flags.max_steps,
            log_every_n_steps=1,
            export_model=mox.ExportKeys.TF_SERVING)


if __name__ == "__main__":
    tf.compat.v1.app.run(main=main)
