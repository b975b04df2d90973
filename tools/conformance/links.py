"""Which test shows each 'same' row of the conformance tables: a row is "same" only where a test
shows it.

``TESTS`` maps a row's (api, name) to ``tests/<file>.py::<test function>``; ``linked(rows)`` gives
the rows with their ``test`` field filled. ``tests/moxing/test_conformance_links.py`` fails when a link
names no existing test, or a "same" row has none. The links were found by a search for tests
that call the name (with the argument as a keyword, for an argument row), then read and
completed by hand; a row no test shows is "untested" in its table. Import-light: data only.
"""

TESTS = {
    ('BaseTFRecordDataset', 'moxlite:BaseTFRecordDataset'):
        'tests/data/test_probing.py::test_tfrecord_dataset_parses_the_first_records_when_built',
    ('BaseTFRecordDataset._add_feature', 'moxlite:BaseTFRecordDataset._add_feature'):
        'tests/moxing/test_data_api.py::test_a_build_feature_override_decodes_the_features',
    ('BaseTFRecordDataset._build_feature', 'moxlite:BaseTFRecordDataset._build_feature'):
        'tests/moxing/test_data_api.py::test_a_build_feature_override_decodes_the_features',
    ('BaseTFRecordDataset._build_features', 'moxlite:BaseTFRecordDataset._build_features'):
        'tests/moxing/test_data_api.py::test_hooks_moxlite_would_not_call_are_refused_naming_the_supported_ones',
    ('BaseTFRecordDataset._parser', 'moxlite:BaseTFRecordDataset._parser'):
        'tests/moxing/test_data_api.py::test_the_tf18_form_parser_override_without_feature_keys',
    ('from moxing.framework import file', 'moxlite.framework'):
        'tests/moxing/test_file_documented.py::test_framework_import_path_is_moxings',
    ('import moxing.tensorflow as mox', 'moxlite.tensorflow'):
        'tests/moxing/test_data_api.py::test_moxing_tensorflow_is_the_package_face',
    ('mox.EarlyStoppingHook(batch_size)', 'moxlite:EarlyStoppingHook(batch_size)'):
        'tests/moxing/test_early_stopping.py::test_bad_hook_arguments_are_one_line_errors',
    ('mox.EarlyStoppingHook(evaluate_every_n_epochs)', 'moxlite:EarlyStoppingHook(evaluate_every_n_epochs)'):
        'tests/moxing/test_ports_public.py::test_moxing_doc_early_stopping_stops_by_the_documented_rule',
    ('mox.EarlyStoppingHook(min_delta)', 'moxlite:EarlyStoppingHook(min_delta)'):
        'tests/moxing/test_ports_public.py::test_moxing_doc_early_stopping_stops_by_the_documented_rule',
    ('mox.EarlyStoppingHook(monitor)', 'moxlite:EarlyStoppingHook(monitor)'):
        'tests/moxing/test_early_stopping.py::test_bad_hook_arguments_are_one_line_errors',
    ('mox.EarlyStoppingHook(monitor_info)', 'moxlite:EarlyStoppingHook(monitor_info)'):
        'tests/moxing/test_early_stopping.py::test_bad_hook_arguments_are_one_line_errors',
    ('mox.EarlyStoppingHook(patience)', 'moxlite:EarlyStoppingHook(patience)'):
        'tests/moxing/test_ports_public.py::test_moxing_doc_early_stopping_stops_by_the_documented_rule',
    ('mox.EarlyStoppingHook(prefix)', 'moxlite:EarlyStoppingHook(prefix)'):
        'tests/moxing/test_ports_public.py::test_moxing_doc_early_stopping_stops_by_the_documented_rule',
    ('mox.EarlyStoppingHook(samples_in_eval)', 'moxlite:EarlyStoppingHook(samples_in_eval)'):
        'tests/moxing/test_early_stopping.py::test_bad_hook_arguments_are_one_line_errors',
    ('mox.EarlyStoppingHook(samples_in_train)', 'moxlite:EarlyStoppingHook(samples_in_train)'):
        'tests/moxing/test_early_stopping.py::test_bad_hook_arguments_are_one_line_errors',
    ('mox.ExportSpec(inputs_dict)', 'moxlite:ExportSpec(inputs_dict)'):
        'tests/training/mixed_precision/test_precision_semantics.py::test_values_model_fn_returns_are_float32_after_o2_in_predict_and_the_saved_model',
    ('mox.ExportSpec(outputs_dict)', 'moxlite:ExportSpec(outputs_dict)'):
        'tests/training/mixed_precision/test_precision_semantics.py::test_values_model_fn_returns_are_float32_after_o2_in_predict_and_the_saved_model',
    ('mox.ExportSpec(version)', 'moxlite:ExportSpec(version)'):
        'tests/moxing/test_ports_public.py::test_moxing_doc_export_tf_serving_versions_and_serves_the_checkpoint',
    ('mox.ImageClassificationRawDataset(augmentation_fn)', 'moxlite:ImageClassificationRawDataset(augmentation_fn)'):
        'tests/moxing/test_raw_images.py::test_augmentation_applied_in_input_fn_as_moxing_scripts_did',
    ('mox.ImageClassificationRawDataset(batch_size)', 'moxlite:ImageClassificationRawDataset(batch_size)'):
        'tests/data/test_probing.py::test_run_with_a_moxing_data_set_over_a_bad_file_writes_nothing',
    ('mox.ImageClassificationRawDataset(image_size)', 'moxlite:ImageClassificationRawDataset(image_size)'):
        'tests/moxing/test_ports_public.py::test_modelarts_mox_flowers_zoo_on_a_raw_folder_for_twenty_epochs',
    ('mox.ImageClassificationRawDataset(metadata)', 'moxlite:ImageClassificationRawDataset(metadata)'):
        'tests/moxing/test_raw_images.py::test_dataset_features_are_the_files_decoded',
    ('mox.ImageClassificationRawDataset(num_epochs)', 'moxlite:ImageClassificationRawDataset(num_epochs)'):
        'tests/moxing/test_data_api.py::test_raw_metadata_reads_labels_txt_and_gives_label_desc',
    ('mox.ImageClassificationRawDataset(reader_class)', 'moxlite:ImageClassificationRawDataset(reader_class)'):
        'tests/moxing/test_raw_images.py::test_dataset_features_are_the_files_decoded',
    ('mox.ImageClassificationRawDataset(shuffle)', 'moxlite:ImageClassificationRawDataset(shuffle)'):
        'tests/moxing/test_data_api.py::test_raw_metadata_reads_labels_txt_and_gives_label_desc',
    ('mox.ImageClassificationRawMetadata', 'moxlite:ImageClassificationRawMetadata'):
        'tests/moxing/test_raw_images.py::test_metadata_counts_the_class_folders',
    ('mox.ImageClassificationRawMetadata(base_dir)', 'moxlite:ImageClassificationRawMetadata(base_dir)'):
        'tests/moxing/test_raw_images.py::test_metadata_counts_the_class_folders',
    ('mox.ImageClassificationTFRecordDataset', 'moxlite:ImageClassificationTFRecordDataset'):
        'tests/moxing/test_data_api.py::test_image_classification_tfrecord_dataset_and_metadata',
    ('mox.ImageClassificationTFRecordDataset(custom_feature_keys)', 'moxlite:ImageClassificationTFRecordDataset(custom_feature_keys)'):
        'tests/moxing/test_data_api.py::test_image_classification_tfrecord_dataset_and_metadata',
    ('mox.ImageClassificationTFRecordDataset(custom_feature_values)', 'moxlite:ImageClassificationTFRecordDataset(custom_feature_values)'):
        'tests/moxing/test_data_api.py::test_image_classification_tfrecord_dataset_and_metadata',
    ('mox.ImageClassificationTFRecordDataset(image_size)', 'moxlite:ImageClassificationTFRecordDataset(image_size)'):
        'tests/moxing/test_data_api.py::test_image_classification_tfrecord_dataset_and_metadata',
    ('mox.ImageClassificationTFRecordDataset(label_one_hot)', 'moxlite:ImageClassificationTFRecordDataset(label_one_hot)'):
        'tests/moxing/test_data_api.py::test_image_classification_tfrecord_dataset_and_metadata',
    ('mox.ImageClassificationTFRecordDataset(metadata)', 'moxlite:ImageClassificationTFRecordDataset(metadata)'):
        'tests/moxing/test_data_api.py::test_image_classification_tfrecord_dataset_and_metadata',
    ('mox.ImageClassificationTFRecordDataset(num_epochs)', 'moxlite:ImageClassificationTFRecordDataset(num_epochs)'):
        'tests/moxing/test_data_api.py::test_image_classification_tfrecord_dataset_and_metadata',
    ('mox.ImageClassificationTFRecordDataset(num_parallel)', 'moxlite:ImageClassificationTFRecordDataset(num_parallel)'):
        'tests/moxing/test_ports_public.py::test_modelarts_train_iceberg_tfrecords_train_export_eval_predict',
    ('mox.ImageClassificationTFRecordDataset(shuffle)', 'moxlite:ImageClassificationTFRecordDataset(shuffle)'):
        'tests/moxing/test_data_api.py::test_image_classification_tfrecord_dataset_and_metadata',
    ('mox.ImageClassificationTFRecordMetadata', 'moxlite:ImageClassificationTFRecordMetadata'):
        'tests/data/test_probing.py::test_tfrecord_dataset_parses_the_first_records_when_built',
    ('mox.ImageClassificationTFRecordMetadata(base_dir)', 'moxlite:ImageClassificationTFRecordMetadata(base_dir)'):
        'tests/moxing/test_data_api.py::test_image_classification_tfrecord_dataset_and_metadata',
    ('mox.ImageClassificationTFRecordMetadata(file_pattern)', 'moxlite:ImageClassificationTFRecordMetadata(file_pattern)'):
        'tests/moxing/test_ports_public.py::test_modelarts_train_iceberg_tfrecords_train_export_eval_predict',
    ('mox.ImageClassificationTFRecordMetadata(num_classes)', 'moxlite:ImageClassificationTFRecordMetadata(num_classes)'):
        'tests/data/test_probing.py::test_tfrecord_metadata_checks_each_file',
    ('mox.ImageClassificationTFRecordMetadata(num_samples)', 'moxlite:ImageClassificationTFRecordMetadata(num_samples)'):
        'tests/moxing/test_ports_public.py::test_modelarts_train_iceberg_tfrecords_train_export_eval_predict',
    ('mox.ModeKeys', 'moxlite:ModeKeys'):
        'tests/training/test_run_modes.py::test_eval_averages_over_the_whole_set_like_numpy',
    ('mox.ModeKeys.EVAL', 'moxlite:ModeKeys.EVAL'):
        'tests/training/test_run_modes.py::test_eval_averages_over_the_whole_set_like_numpy',
    ('mox.ModeKeys.EXPORT', 'moxlite:ModeKeys.EXPORT'):
        'tests/training/test_run_modes.py::test_export_to_an_existing_named_version_is_refused',
    ('mox.ModeKeys.PREDICT', 'moxlite:ModeKeys.PREDICT'):
        'tests/training/test_run_modes.py::test_predict_hands_numpy_outputs_to_output_fn_every_n_steps',
    ('mox.ModeKeys.TRAIN', 'moxlite:ModeKeys.TRAIN'):
        'tests/training/test_run_train.py::test_linear_model_steps_equal_numpy',
    ('mox.ModelSpec', 'moxlite:ModelSpec'):
        'tests/training/test_run_train.py::test_linear_model_steps_equal_numpy',
    ('mox.ModelSpec(export_spec)', 'moxlite:ModelSpec(export_spec)'):
        'tests/training/mixed_precision/test_precision_semantics.py::test_values_model_fn_returns_are_float32_after_o2_in_predict_and_the_saved_model',
    ('mox.ModelSpec(log_info)', 'moxlite:ModelSpec(log_info)'):
        'tests/training/test_run_modes.py::test_eval_averages_over_the_whole_set_like_numpy',
    ('mox.ModelSpec(loss)', 'moxlite:ModelSpec(loss)'):
        'tests/training/test_run_train.py::test_linear_model_steps_equal_numpy',
    ('mox.ModelSpec(output_info)', 'moxlite:ModelSpec(output_info)'):
        'tests/training/test_run_modes.py::test_predict_hands_numpy_outputs_to_output_fn_every_n_steps',
    ('mox.ModelSpec(var_scopes)', 'moxlite:ModelSpec(var_scopes)'):
        'tests/training/test_run_train.py::test_two_losses_train_their_own_variable_scopes',
    ('mox.file', 'File'):
        'tests/moxing/test_file.py::test_file_object_works_with_pandas',
    ('mox.file', 'File(mode)'):
        'tests/moxing/test_conformance_file.py::test_every_mode_row_opens_a_file_in_that_mode',
    ('mox.file', "File(mode='a')"):
        'tests/moxing/test_file.py::test_file_object_works_with_pandas',
    ('mox.file', "File(mode='a+')"):
        'tests/moxing/test_file.py::test_file_object_works_with_pandas',
    ('mox.file', "File(mode='ba')"):
        'tests/moxing/test_file.py::test_file_object_works_with_pandas',
    ('mox.file', "File(mode='ba+')"):
        'tests/moxing/test_file.py::test_file_object_works_with_pandas',
    ('mox.file', "File(mode='br')"):
        'tests/moxing/test_file.py::test_file_object_works_with_pandas',
    ('mox.file', "File(mode='br+')"):
        'tests/moxing/test_file.py::test_file_object_works_with_pandas',
    ('mox.file', "File(mode='bw')"):
        'tests/moxing/test_file.py::test_file_object_works_with_pandas',
    ('mox.file', "File(mode='bw+')"):
        'tests/moxing/test_file.py::test_file_object_works_with_pandas',
    ('mox.file', "File(mode='r')"):
        'tests/moxing/test_file.py::test_file_object_works_with_pandas',
    ('mox.file', "File(mode='r+')"):
        'tests/moxing/test_file.py::test_file_object_works_with_pandas',
    ('mox.file', "File(mode='w')"):
        'tests/moxing/test_file.py::test_file_object_works_with_pandas',
    ('mox.file', "File(mode='w+')"):
        'tests/moxing/test_file.py::test_file_object_works_with_pandas',
    ('mox.file', 'File(name)'):
        'tests/moxing/test_file_documented.py::test_every_documented_mode_does_what_open_does',
    ('mox.file', 'File.close'):
        'tests/moxing/test_file_documented.py::test_read_plus_uploads_only_once_written',
    ('mox.file', 'File.flush'):
        'tests/moxing/test_file.py::test_file_object_with_flush_logging_and_append',
    ('mox.file', 'File.mode'):
        'tests/moxing/test_file_documented.py::test_an_undocumented_mode_and_a_folder_are_refused',
    ('mox.file', 'File.name'):
        'tests/moxing/test_file_documented.py::test_clashing_object_names_are_moxfilenameduplicate_before_any_copy',
    ('mox.file', 'File.read'):
        'tests/moxing/test_file_documented.py::test_every_documented_mode_does_what_open_does',
    ('mox.file', 'File.readable'):
        'tests/moxing/test_file_documented.py::test_every_documented_mode_does_what_open_does',
    ('mox.file', 'File.readline'):
        'tests/moxing/test_file_documented.py::test_every_documented_mode_does_what_open_does',
    ('mox.file', 'File.readlines'):
        'tests/moxing/test_file_documented.py::test_every_documented_mode_does_what_open_does',
    ('mox.file', 'File.seek'):
        'tests/moxing/test_file_documented.py::test_every_documented_mode_does_what_open_does',
    ('mox.file', 'File.seekable'):
        'tests/moxing/test_file_documented.py::test_every_documented_mode_does_what_open_does',
    ('mox.file', 'File.size'):
        'tests/moxing/test_file_documented.py::test_file_size_counts_the_bytes_in_the_file_now',
    ('mox.file', 'File.tell'):
        'tests/moxing/test_file_documented.py::test_every_documented_mode_does_what_open_does',
    ('mox.file', 'File.writable'):
        'tests/moxing/test_file_documented.py::test_every_documented_mode_does_what_open_does',
    ('mox.file', 'File.write'):
        'tests/moxing/test_file_documented.py::test_every_documented_mode_does_what_open_does',
    ('mox.file', 'File.writelines'):
        'tests/moxing/test_file_documented.py::test_every_documented_mode_does_what_open_does',
    ('mox.file', 'MoxFileNameDuplicateException'):
        'tests/moxing/test_file_documented.py::test_clashing_object_names_are_moxfilenameduplicate_before_any_copy',
    ('mox.file', 'MoxFileNotExistsException'):
        'tests/moxing/test_file_documented.py::test_remove_of_a_missing_path_or_a_bucket_is_refused',
    ('mox.file', 'MoxFileReadException'):
        'tests/moxing/test_file_documented.py::test_a_read_broken_after_200_is_moxfilereadexception',
    ('mox.file', 'MoxFileRespException'):
        'tests/moxing/test_file_documented.py::test_missing_path_is_moxfilenotexists_filenotfound_and_a_404_response',
    ('mox.file', 'append'):
        'tests/moxing/test_file.py::test_read_write_append_make_remove_rename_same_on_every_store',
    ('mox.file', 'append(binary)'):
        'tests/moxing/test_file.py::test_read_write_append_make_remove_rename_same_on_every_store',
    ('mox.file', 'append(data)'):
        'tests/moxing/test_file_documented.py::test_documented_argument_names_work_as_keywords',
    ('mox.file', 'append(url)'):
        'tests/moxing/test_file_documented.py::test_documented_argument_names_work_as_keywords',
    ('mox.file', 'append_remote'):
        'tests/moxing/test_file_documented.py::test_append_remote_adds_one_file_at_the_end_of_another',
    ('mox.file', 'append_remote(src_url)'):
        'tests/moxing/test_file_documented.py::test_append_remote_adds_one_file_at_the_end_of_another',
    ('mox.file', 'copy'):
        'tests/moxing/test_file.py::test_copy_and_rename_across_local_and_object_storage',
    ('mox.file', "copy('s3://b/file', '/existing/folder')"):
        'tests/moxing/test_file.py::test_copy_and_rename_across_local_and_object_storage',
    ('mox.file', 'copy(dst_url)'):
        'tests/moxing/test_file_documented.py::test_documented_argument_names_work_as_keywords',
    ('mox.file', 'copy(src_url)'):
        'tests/moxing/test_file_documented.py::test_documented_argument_names_work_as_keywords',
    ('mox.file', 'copy_parallel'):
        'tests/moxing/test_file_at_exit.py::test_copy_parallel_to_and_from_object_storage_in_an_atexit_handler',
    ('mox.file', 'copy_parallel(dst_url)'):
        'tests/moxing/test_file_documented.py::test_documented_argument_names_work_as_keywords',
    ('mox.file', 'copy_parallel(file_list)'):
        'tests/moxing/test_file_documented.py::test_documented_argument_names_work_as_keywords',
    ('mox.file', 'copy_parallel(src_url)'):
        'tests/moxing/test_file_documented.py::test_documented_argument_names_work_as_keywords',
    ('mox.file', 'copy_parallel(threads)'):
        'tests/moxing/test_file.py::test_tree_copied_up_and_down_is_bit_exact',
    ('mox.file', 'exists'):
        'tests/moxing/test_file.py::test_read_write_append_make_remove_rename_same_on_every_store',
    ('mox.file', 'exists(url)'):
        'tests/moxing/test_file_documented.py::test_every_documented_mode_does_what_open_does',
    ('mox.file', 'get_size'):
        'tests/moxing/test_file_documented.py::test_get_size_of_a_local_folder_is_always_its_whole_tree',
    ('mox.file', 'get_size(recursive)'):
        'tests/moxing/test_file_documented.py::test_get_size_of_a_local_folder_is_always_its_whole_tree',
    ('mox.file', 'get_size(url)'):
        'tests/moxing/test_file_documented.py::test_get_size_of_a_local_folder_is_always_its_whole_tree',
    ('mox.file', 'glob'):
        'tests/moxing/test_file.py::test_listing_stat_walk_glob_match_the_local_tree',
    ('mox.file', 'glob(url)'):
        'tests/moxing/test_file_documented.py::test_documented_argument_names_work_as_keywords',
    ('mox.file', 'is_directory'):
        'tests/moxing/test_file_documented.py::test_documented_argument_names_work_as_keywords',
    ('mox.file', 'is_directory(url)'):
        'tests/moxing/test_file_documented.py::test_documented_argument_names_work_as_keywords',
    ('mox.file', 'list_directory'):
        'tests/moxing/test_file_documented.py::test_list_directory_skip_dir_skip_file_remove_sep',
    ('mox.file', 'list_directory(recursive)'):
        'tests/moxing/test_file_documented.py::test_list_directory_skip_dir_skip_file_remove_sep',
    ('mox.file', 'list_directory(remove_sep)'):
        'tests/moxing/test_file_documented.py::test_list_directory_skip_dir_skip_file_remove_sep',
    ('mox.file', 'list_directory(skip_dir)'):
        'tests/moxing/test_file_documented.py::test_list_directory_skip_dir_skip_file_remove_sep',
    ('mox.file', 'list_directory(skip_file)'):
        'tests/moxing/test_file_documented.py::test_list_directory_skip_dir_skip_file_remove_sep',
    ('mox.file', 'list_directory(url)'):
        'tests/moxing/test_file_documented.py::test_list_directory_skip_dir_skip_file_remove_sep',
    ('mox.file', 'make_dirs'):
        'tests/moxing/test_file.py::test_read_write_append_make_remove_rename_same_on_every_store',
    ('mox.file', 'make_dirs(url)'):
        'tests/moxing/test_file_documented.py::test_documented_argument_names_work_as_keywords',
    ('mox.file', 'mk_dir'):
        'tests/moxing/test_file.py::test_read_write_append_make_remove_rename_same_on_every_store',
    ('mox.file', "mk_dir('s3://b/missing/new')"):
        'tests/moxing/test_file_documented.py::test_builtin_errors_python_users_catch',
    ('mox.file', 'mk_dir(url)'):
        'tests/moxing/test_file_documented.py::test_documented_argument_names_work_as_keywords',
    ('mox.file', 'read'):
        'tests/moxing/test_file_documented.py::test_read_plus_uploads_only_once_written',
    ('mox.file', 'read(binary)'):
        'tests/moxing/test_file.py::test_read_write_append_make_remove_rename_same_on_every_store',
    ('mox.file', 'read(url)'):
        'tests/moxing/test_file_documented.py::test_read_plus_uploads_only_once_written',
    ('mox.file', 'remove'):
        'tests/moxing/test_file_documented.py::test_remove_of_a_missing_path_or_a_bucket_is_refused',
    ('mox.file', "remove('s3://b/dir')"):
        'tests/moxing/test_file_documented.py::test_remove_of_a_missing_path_or_a_bucket_is_refused',
    ('mox.file', "remove('s3://b/dir', recursive=True)"):
        'tests/moxing/test_file_documented.py::test_remove_of_a_missing_path_or_a_bucket_is_refused',
    ('mox.file', "remove('s3://b/dir/')"):
        'tests/moxing/test_file_documented.py::test_remove_of_a_missing_path_or_a_bucket_is_refused',
    ('mox.file', "remove('s3://b/dir/', recursive=True)"):
        'tests/moxing/test_file_documented.py::test_remove_of_a_missing_path_or_a_bucket_is_refused',
    ('mox.file', "remove('s3://b/file')"):
        'tests/moxing/test_file_documented.py::test_remove_of_a_missing_path_or_a_bucket_is_refused',
    ('mox.file', "remove('s3://b/file', recursive=True)"):
        'tests/moxing/test_file_documented.py::test_remove_of_a_missing_path_or_a_bucket_is_refused',
    ('mox.file', "remove('s3://b/file/')"):
        'tests/moxing/test_file_documented.py::test_remove_of_a_missing_path_or_a_bucket_is_refused',
    ('mox.file', 'remove(recursive)'):
        'tests/moxing/test_file_documented.py::test_remove_of_a_missing_path_or_a_bucket_is_refused',
    ('mox.file', 'remove(url)'):
        'tests/moxing/test_file_documented.py::test_documented_argument_names_work_as_keywords',
    ('mox.file', 'rename'):
        'tests/moxing/test_file.py::test_copy_and_rename_across_local_and_object_storage',
    ('mox.file', 'rename(dst_url)'):
        'tests/moxing/test_file_documented.py::test_documented_argument_names_work_as_keywords',
    ('mox.file', 'rename(src_url)'):
        'tests/moxing/test_file_documented.py::test_documented_argument_names_work_as_keywords',
    ('mox.file', 'scan_dir'):
        'tests/moxing/test_file_documented.py::test_builtin_errors_python_users_catch',
    ('mox.file', 'scan_dir(url)'):
        'tests/moxing/test_file_documented.py::test_documented_argument_names_work_as_keywords',
    ('mox.file', 'set_auth'):
        'tests/moxing/test_file_documented.py::test_set_auth_refuses_a_wrong_value_before_changing_anything',
    ('mox.file', 'set_auth(ak)'):
        'tests/moxing/test_file_documented.py::test_set_auth_passes_its_documented_arguments_to_the_s3_client',
    ('mox.file', 'set_auth(client_timeout)'):
        'tests/moxing/test_file_documented.py::test_set_auth_passes_its_documented_arguments_to_the_s3_client',
    ('mox.file', 'set_auth(is_secure)'):
        'tests/moxing/test_file.py::test_endpoint_from_the_environment_as_modelarts_sets_it',
    ('mox.file', 'set_auth(long_conn_mode)'):
        'tests/moxing/test_file_documented.py::test_set_auth_passes_its_documented_arguments_to_the_s3_client',
    ('mox.file', 'set_auth(path_style)'):
        'tests/moxing/test_file_documented.py::test_set_auth_passes_its_documented_arguments_to_the_s3_client',
    ('mox.file', 'set_auth(port)'):
        'tests/moxing/test_file.py::test_endpoint_from_the_environment_as_modelarts_sets_it',
    ('mox.file', 'set_auth(retry)'):
        'tests/moxing/test_file_documented.py::test_set_auth_refuses_a_wrong_value_before_changing_anything',
    ('mox.file', 'set_auth(server)'):
        'tests/moxing/test_file_documented.py::test_set_auth_refuses_a_wrong_value_before_changing_anything',
    ('mox.file', 'set_auth(sk)'):
        'tests/moxing/test_file_documented.py::test_set_auth_passes_its_documented_arguments_to_the_s3_client',
    ('mox.file', 'set_auth(ssl_verify)'):
        'tests/moxing/test_file_documented.py::test_set_auth_passes_its_documented_arguments_to_the_s3_client',
    ('mox.file', 'shift'):
        'tests/moxing/test_file_documented.py::test_shift_lets_pythons_file_calls_take_object_storage_paths',
    ('mox.file', 'stat'):
        'tests/moxing/test_file.py::test_listing_stat_walk_glob_match_the_local_tree',
    ('mox.file', 'stat(src_url)'):
        'tests/moxing/test_file_documented.py::test_documented_argument_names_work_as_keywords',
    ('mox.file', 'walk'):
        'tests/moxing/test_file_documented.py::test_walk_followlinks_is_os_walks_on_local_paths',
    ('mox.file', 'walk(followlinks)'):
        'tests/moxing/test_file_documented.py::test_walk_followlinks_is_os_walks_on_local_paths',
    ('mox.file', 'walk(onerror)'):
        'tests/moxing/test_file_documented.py::test_documented_argument_names_work_as_keywords',
    ('mox.file', 'walk(topdown)'):
        'tests/moxing/test_file_documented.py::test_documented_argument_names_work_as_keywords',
    ('mox.file', 'walk(url)'):
        'tests/moxing/test_file_documented.py::test_list_directory_skip_dir_skip_file_remove_sep',
    ('mox.file', 'write'):
        'tests/moxing/test_file_documented.py::test_copy_to_an_existing_folder_is_isadirectoryerror_and_writes_nothing',
    ('mox.file', 'write(binary)'):
        'tests/moxing/test_file.py::test_read_write_append_make_remove_rename_same_on_every_store',
    ('mox.file', 'write(data)'):
        'tests/moxing/test_file_documented.py::test_documented_argument_names_work_as_keywords',
    ('mox.file', 'write(url)'):
        'tests/moxing/test_file_documented.py::test_file_size_counts_the_bytes_in_the_file_now',
    ('mox.get_collection', 'moxlite:get_collection'):
        'tests/models/test_zoo.py::test_local_weights_file_weight_decay_and_the_logits_pattern',
    ('mox.get_data_augmentation_fn', 'moxlite:get_data_augmentation_fn'):
        'tests/moxing/test_raw_images.py::test_wrong_inputs_get_one_line_errors',
    ('mox.get_data_augmentation_fn(name)', 'moxlite:get_data_augmentation_fn(name)'):
        'tests/moxing/test_raw_images.py::test_train_augmentation_is_random_geometry_then_the_same_scaling',
    ('mox.get_data_augmentation_fn(output_height)', 'moxlite:get_data_augmentation_fn(output_height)'):
        'tests/moxing/test_raw_images.py::test_a_crop_taller_than_wide_always_fits_the_resized_image',
    ('mox.get_data_augmentation_fn(output_width)', 'moxlite:get_data_augmentation_fn(output_width)'):
        'tests/moxing/test_raw_images.py::test_a_crop_taller_than_wide_always_fits_the_resized_image',
    ('mox.get_data_augmentation_fn(run_mode)', 'moxlite:get_data_augmentation_fn(run_mode)'):
        'tests/moxing/test_raw_images.py::test_random_augmentation_resumes_exactly',
    ('mox.get_dataset', 'moxlite:get_dataset'):
        'tests/moxing/test_data_api.py::test_named_data_sets_read_slim_files',
    ('mox.get_dataset(dataset_dir)', 'moxlite:get_dataset(dataset_dir)'):
        'tests/moxing/test_data_api.py::test_named_data_sets_read_slim_files',
    ('mox.get_dataset(name)', 'moxlite:get_dataset(name)'):
        'tests/moxing/test_data_api.py::test_named_data_sets_read_slim_files',
    ('mox.get_dataset(split_name)', 'moxlite:get_dataset(split_name)'):
        'tests/moxing/test_data_api.py::test_named_data_sets_read_slim_files',
    ('mox.get_dataset_meta', 'moxlite:get_dataset_meta'):
        'tests/moxing/test_data_api.py::test_named_data_sets_read_slim_files',
    ('mox.get_flag', 'moxlite:get_flag'):
        'tests/moxing/test_script_flags.py::test_script_definitions_win_and_moxlite_reads_them_in_its_own_kind_or_says_why_not',
    ('mox.get_model_fn(batch_norm_fused)', 'moxlite:get_model_fn(batch_norm_fused)'):
        'tests/moxing/test_ports_public.py::test_moxing_doc_export_tf_serving_versions_and_serves_the_checkpoint',
    ('mox.get_model_fn(data_format)', 'moxlite:get_model_fn(data_format)'):
        'tests/moxing/test_ports_public.py::test_moxing_doc_export_tf_serving_versions_and_serves_the_checkpoint',
    ('mox.get_model_fn(name)', 'moxlite:get_model_fn(name)'):
        'tests/models/test_zoo.py::test_var_scope_keeps_fp32_variables_under_fp16_images',
    ('mox.get_model_fn(num_classes)', 'moxlite:get_model_fn(num_classes)'):
        'tests/models/test_zoo.py::test_bad_names_and_arguments_get_one_line_errors',
    ('mox.get_model_fn(run_mode)', 'moxlite:get_model_fn(run_mode)'):
        'tests/moxing/test_ports_public.py::test_moxing_doc_predict_output_fn_writes_a_dataframe_to_obs',
    ('mox.get_model_fn(weight_decay)', 'moxlite:get_model_fn(weight_decay)'):
        'tests/moxing/test_ports_public.py::test_moxing_doc_predict_output_fn_writes_a_dataframe_to_obs',
    ('mox.get_optimizer_fn', 'moxlite:get_optimizer_fn'):
        'tests/optimizers/test_optimizer_factory.py::test_sgd_and_momentum_steps_equal_numpy',
    ("mox.get_optimizer_fn('foo')", 'moxlite:get_optimizer_fn'):
        'tests/optimizers/test_optimizer_factory.py::test_unknown_name_lists_the_valid_names',
    ('mox.get_optimizer_fn(learning_rate)', 'moxlite:get_optimizer_fn(learning_rate)'):
        'tests/optimizers/test_tf1_step_rates.py::test_get_optimizer_fn_takes_moxings_learning_rates_of_the_step',
    ('mox.get_optimizer_fn(name)', 'moxlite:get_optimizer_fn(name)'):
        'tests/moxing/test_ports_script_patterns.py::test_fine_tune_warm_starts_by_name_with_a_new_head_and_an_inserted_layer',
    ('mox.get_optimizer_wrapper_fn', 'moxlite:get_optimizer_wrapper_fn'):
        'tests/optimizers/test_optimizer_factory.py::test_top_level_exports_are_the_factories',
    ('mox.get_tfrecord', 'moxlite:get_tfrecord'):
        'tests/moxing/test_data_api.py::test_get_tfrecord_with_slim_style_handlers',
    ('mox.get_tfrecord(dataset_dir)', 'moxlite:get_tfrecord(dataset_dir)'):
        'tests/moxing/test_data_api.py::test_get_tfrecord_with_slim_style_handlers',
    ('mox.get_tfrecord(file_pattern)', 'moxlite:get_tfrecord(file_pattern)'):
        'tests/moxing/test_data_api.py::test_get_tfrecord_with_slim_style_handlers',
    ('mox.get_tfrecord(items_to_handlers)', 'moxlite:get_tfrecord(items_to_handlers)'):
        'tests/moxing/test_data_api.py::test_get_tfrecord_with_slim_style_handlers',
    ('mox.get_tfrecord(keys_to_features)', 'moxlite:get_tfrecord(keys_to_features)'):
        'tests/moxing/test_data_api.py::test_get_tfrecord_with_slim_style_handlers',
    ('mox.get_tfrecord(num_epochs)', 'moxlite:get_tfrecord(num_epochs)'):
        'tests/moxing/test_data_api.py::test_get_tfrecord_with_slim_style_handlers',
    ('mox.get_tfrecord(num_samples)', 'moxlite:get_tfrecord(num_samples)'):
        'tests/moxing/test_data_api.py::test_get_tfrecord_with_slim_style_handlers',
    ('mox.get_tfrecord(shuffle)', 'moxlite:get_tfrecord(shuffle)'):
        'tests/moxing/test_data_api.py::test_get_tfrecord_with_slim_style_handlers',
    ('mox.run', 'moxlite:run'):
        'tests/training/test_run_train.py::test_linear_model_steps_equal_numpy',
    ('mox.run(auto_batch)', 'moxlite:run(auto_batch)'):
        'tests/training/test_run_auto_batch.py::test_tensors_are_one_batch_in_every_mode',
    ('mox.run(batch_size)', 'moxlite:run(batch_size)'):
        'tests/training/test_run_auto_batch.py::test_the_announced_batch_is_the_batch_that_trains',
    ('mox.run(checkpoint_path)', 'moxlite:run(checkpoint_path)'):
        'tests/training/test_run_object_storage.py::test_train_to_s3_resume_from_it_equals_an_uninterrupted_run',
    ('mox.run(export_model)', 'moxlite:run(export_model)'):
        'tests/training/test_run_documented_values.py::test_export_model_true_exports_and_eval_takes_save_summary_steps_none',
    ('mox.run(input_fn)', 'moxlite:run(input_fn)'):
        'tests/training/test_run_logs.py::test_batch_size_and_log_dir_flags_fill_missing_run_arguments',
    ('mox.run(inter_mode)', 'moxlite:run(inter_mode)'):
        'tests/training/test_run_modes.py::test_train_with_inter_mode_eval_and_export',
    ('mox.run(log_dir)', 'moxlite:run(log_dir)'):
        'tests/training/test_run_object_storage.py::test_a_log_dir_that_is_an_object_is_refused',
    ('mox.run(log_every_n_steps)', 'moxlite:run(log_every_n_steps)'):
        'tests/training/test_run_config.py::test_a_recipe_run_sets_no_flag_and_ignores_the_scripts_flags',
    ('mox.run(max_number_of_steps)', 'moxlite:run(max_number_of_steps)'):
        'tests/training/test_run_logs.py::test_batch_size_and_log_dir_flags_fill_missing_run_arguments',
    ('mox.run(model_fn)', 'moxlite:run(model_fn)'):
        'tests/training/test_run_object_storage.py::test_checkpoints_reach_object_storage_while_training_runs',
    ('mox.run(optimizer_fn)', 'moxlite:run(optimizer_fn)'):
        'tests/training/test_run_logs.py::test_batch_size_and_log_dir_flags_fill_missing_run_arguments',
    ('mox.run(output_every_n_steps)', 'moxlite:run(output_every_n_steps)'):
        'tests/training/test_run_modes.py::test_predict_hands_numpy_outputs_to_output_fn_every_n_steps',
    ('mox.run(output_fn)', 'moxlite:run(output_fn)'):
        'tests/training/test_run_modes.py::test_predict_hands_numpy_outputs_to_output_fn_every_n_steps',
    ('mox.run(run_mode)', 'moxlite:run(run_mode)'):
        'tests/training/test_run_logs.py::test_batch_size_and_log_dir_flags_fill_missing_run_arguments',
    ("mox.run(run_mode='invalid')", 'moxlite:run'):
        'tests/moxing/test_conformance_rows.py::test_row_holds',
    ('mox.run(save_model_secs)', 'moxlite:run(save_model_secs)'):
        'tests/moxing/test_ports_public.py::test_modelarts_train_iceberg_tfrecords_train_export_eval_predict',
    ('mox.run(save_model_steps)', 'moxlite:run(save_model_steps)'):
        'tests/training/test_run_object_storage.py::test_checkpoints_reach_object_storage_while_training_runs',
    ('mox.run(save_summary_steps)', 'moxlite:run(save_summary_steps)'):
        'tests/training/test_run_documented_values.py::test_export_model_true_exports_and_eval_takes_save_summary_steps_none',
    ('mox.set_flag', 'moxlite:set_flag'):
        'tests/moxing/test_script_flags.py::test_script_definitions_win_and_moxlite_reads_them_in_its_own_kind_or_says_why_not',
    ('mox.var_scope', 'moxlite:var_scope'):
        'tests/models/test_zoo.py::test_var_scope_keeps_fp32_variables_under_fp16_images',
    ('moxing.framework.util.compat', 'moxlite.framework.util.compat'):
        'tests/moxing/test_data_api.py::test_moxing_tensorflow_is_the_package_face',
    ('moxing.tensorflow.datasets', 'moxlite.tensorflow.datasets'):
        'tests/moxing/test_data_api.py::test_moxings_import_paths_give_moxlites_objects',
    ('moxing.tensorflow.datasets.raw.raw_dataset', 'moxlite.tensorflow.datasets.raw.raw_dataset'):
        'tests/moxing/test_data_api.py::test_moxings_import_paths_give_moxlites_objects',
    ('moxing.tensorflow.datasets.reader.raw_reader', 'moxlite.tensorflow.datasets.reader.raw_reader'):
        'tests/moxing/test_data_api.py::test_moxings_import_paths_give_moxlites_objects',
    ('moxing.tensorflow.datasets.tfrecord_common', 'moxlite.tensorflow.datasets.tfrecord_common'):
        'tests/moxing/test_data_api.py::test_moxings_import_paths_give_moxlites_objects',
    ('moxing.tensorflow.executor', 'moxlite.tensorflow.executor'):
        'tests/moxing/test_data_api.py::test_moxings_import_paths_give_moxlites_objects',
    ('moxing.tensorflow.nets', 'moxlite.tensorflow.nets'):
        'tests/moxing/test_data_api.py::test_moxings_import_paths_give_moxlites_objects',
    ('moxing.tensorflow.optimizer.learning_rate_scheduler', 'moxlite.tensorflow.optimizer'):
        'tests/moxing/test_ports_public.py::test_modelarts_mox_flowers_zoo_on_a_raw_folder_for_twenty_epochs',
    ('moxing.tensorflow.preprocessing', 'moxlite.tensorflow.preprocessing'):
        'tests/moxing/test_data_api.py::test_moxings_import_paths_give_moxlites_objects',
}


def linked(rows):
    """``rows`` with each one's ``test`` field set from ``TESTS`` ('' where none is linked)."""
    return [row._replace(test=TESTS.get((row.api, row.name), "")) for row in rows]
