from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Artifact(_message.Message):
    __slots__ = ["kind", "name", "sha256", "size_bytes"]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    sha256: str
    size_bytes: int
    def __init__(self, name: _Optional[str] = ..., size_bytes: _Optional[int] = ..., sha256: _Optional[str] = ..., kind: _Optional[str] = ...) -> None: ...

class ArtifactChunk(_message.Message):
    __slots__ = ["data", "offset", "sha256", "size_bytes"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offset: int
    sha256: str
    size_bytes: int
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ..., size_bytes: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class AugmentationSpec(_message.Message):
    __slots__ = ["center_crop", "color_jitter", "cutmix", "horizontal_flip", "mixup", "random_crop_padding", "random_erasing", "random_resized_crop", "random_rotation", "resize"]
    CENTER_CROP_FIELD_NUMBER: _ClassVar[int]
    COLOR_JITTER_FIELD_NUMBER: _ClassVar[int]
    CUTMIX_FIELD_NUMBER: _ClassVar[int]
    HORIZONTAL_FLIP_FIELD_NUMBER: _ClassVar[int]
    MIXUP_FIELD_NUMBER: _ClassVar[int]
    RANDOM_CROP_PADDING_FIELD_NUMBER: _ClassVar[int]
    RANDOM_ERASING_FIELD_NUMBER: _ClassVar[int]
    RANDOM_RESIZED_CROP_FIELD_NUMBER: _ClassVar[int]
    RANDOM_ROTATION_FIELD_NUMBER: _ClassVar[int]
    RESIZE_FIELD_NUMBER: _ClassVar[int]
    center_crop: _containers.RepeatedScalarFieldContainer[int]
    color_jitter: ColorJitterSpec
    cutmix: MixSpec
    horizontal_flip: bool
    mixup: MixSpec
    random_crop_padding: int
    random_erasing: RandomErasingSpec
    random_resized_crop: RandomResizedCropSpec
    random_rotation: RandomRotationSpec
    resize: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, random_crop_padding: _Optional[int] = ..., horizontal_flip: bool = ..., random_resized_crop: _Optional[_Union[RandomResizedCropSpec, _Mapping]] = ..., resize: _Optional[_Iterable[int]] = ..., center_crop: _Optional[_Iterable[int]] = ..., color_jitter: _Optional[_Union[ColorJitterSpec, _Mapping]] = ..., random_rotation: _Optional[_Union[RandomRotationSpec, _Mapping]] = ..., random_erasing: _Optional[_Union[RandomErasingSpec, _Mapping]] = ..., mixup: _Optional[_Union[MixSpec, _Mapping]] = ..., cutmix: _Optional[_Union[MixSpec, _Mapping]] = ...) -> None: ...

class BenchJob(_message.Message):
    __slots__ = ["batch_sizes", "cpu_threads", "cudnn_benchmark", "devices", "fault_injection", "input_shape", "iters", "memory_formats", "min_time_ms", "mode", "models", "num_classes", "optimizer", "precisions", "seed", "warmup_iters"]
    BATCH_SIZES_FIELD_NUMBER: _ClassVar[int]
    CPU_THREADS_FIELD_NUMBER: _ClassVar[int]
    CUDNN_BENCHMARK_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    FAULT_INJECTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SHAPE_FIELD_NUMBER: _ClassVar[int]
    ITERS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FORMATS_FIELD_NUMBER: _ClassVar[int]
    MIN_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    NUM_CLASSES_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    PRECISIONS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    WARMUP_ITERS_FIELD_NUMBER: _ClassVar[int]
    batch_sizes: _containers.RepeatedScalarFieldContainer[int]
    cpu_threads: int
    cudnn_benchmark: bool
    devices: _containers.RepeatedScalarFieldContainer[str]
    fault_injection: FaultInjection
    input_shape: _containers.RepeatedScalarFieldContainer[int]
    iters: int
    memory_formats: _containers.RepeatedScalarFieldContainer[str]
    min_time_ms: float
    mode: str
    models: _containers.RepeatedScalarFieldContainer[str]
    num_classes: int
    optimizer: OptimizerSpec
    precisions: _containers.RepeatedScalarFieldContainer[str]
    seed: int
    warmup_iters: int
    def __init__(self, models: _Optional[_Iterable[str]] = ..., batch_sizes: _Optional[_Iterable[int]] = ..., devices: _Optional[_Iterable[str]] = ..., warmup_iters: _Optional[int] = ..., iters: _Optional[int] = ..., mode: _Optional[str] = ..., precisions: _Optional[_Iterable[str]] = ..., min_time_ms: _Optional[float] = ..., input_shape: _Optional[_Iterable[int]] = ..., num_classes: _Optional[int] = ..., cpu_threads: _Optional[int] = ..., memory_formats: _Optional[_Iterable[str]] = ..., seed: _Optional[int] = ..., optimizer: _Optional[_Union[OptimizerSpec, _Mapping]] = ..., cudnn_benchmark: bool = ..., fault_injection: _Optional[_Union[FaultInjection, _Mapping]] = ...) -> None: ...

class BenchRow(_message.Message):
    __slots__ = ["batch_size", "cpu_threads", "device", "iters", "mean_ms", "median_ms", "memory_format", "message", "mode", "model", "p10_ms", "p90_ms", "parameters", "peak_memory_bytes", "precision", "samples_per_second", "speedup_vs_cpu", "status", "step", "step_note"]
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = []
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    CPU_THREADS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    ERROR: BenchRow.Status
    ITERS_FIELD_NUMBER: _ClassVar[int]
    MEAN_MS_FIELD_NUMBER: _ClassVar[int]
    MEDIAN_MS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FORMAT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    OK: BenchRow.Status
    OUT_OF_MEMORY: BenchRow.Status
    P10_MS_FIELD_NUMBER: _ClassVar[int]
    P90_MS_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    PEAK_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    SPEEDUP_VS_CPU_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STATUS_UNSPECIFIED: BenchRow.Status
    STEP_FIELD_NUMBER: _ClassVar[int]
    STEP_NOTE_FIELD_NUMBER: _ClassVar[int]
    UNSUPPORTED: BenchRow.Status
    batch_size: int
    cpu_threads: int
    device: str
    iters: int
    mean_ms: float
    median_ms: float
    memory_format: str
    message: str
    mode: str
    model: str
    p10_ms: float
    p90_ms: float
    parameters: int
    peak_memory_bytes: int
    precision: str
    samples_per_second: float
    speedup_vs_cpu: float
    status: BenchRow.Status
    step: str
    step_note: str
    def __init__(self, model: _Optional[str] = ..., batch_size: _Optional[int] = ..., device: _Optional[str] = ..., precision: _Optional[str] = ..., mode: _Optional[str] = ..., memory_format: _Optional[str] = ..., status: _Optional[_Union[BenchRow.Status, str]] = ..., message: _Optional[str] = ..., median_ms: _Optional[float] = ..., p10_ms: _Optional[float] = ..., p90_ms: _Optional[float] = ..., mean_ms: _Optional[float] = ..., samples_per_second: _Optional[float] = ..., peak_memory_bytes: _Optional[int] = ..., cpu_threads: _Optional[int] = ..., iters: _Optional[int] = ..., speedup_vs_cpu: _Optional[float] = ..., parameters: _Optional[int] = ..., step: _Optional[str] = ..., step_note: _Optional[str] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ["job_id"]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class CheckpointSaved(_message.Message):
    __slots__ = ["epoch", "path", "size_bytes", "step"]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    path: str
    size_bytes: int
    step: int
    def __init__(self, path: _Optional[str] = ..., epoch: _Optional[int] = ..., step: _Optional[int] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class CheckpointSpec(_message.Message):
    __slots__ = ["every_epochs", "every_steps", "keep_best", "keep_last"]
    EVERY_EPOCHS_FIELD_NUMBER: _ClassVar[int]
    EVERY_STEPS_FIELD_NUMBER: _ClassVar[int]
    KEEP_BEST_FIELD_NUMBER: _ClassVar[int]
    KEEP_LAST_FIELD_NUMBER: _ClassVar[int]
    every_epochs: int
    every_steps: int
    keep_best: bool
    keep_last: int
    def __init__(self, every_epochs: _Optional[int] = ..., every_steps: _Optional[int] = ..., keep_last: _Optional[int] = ..., keep_best: bool = ...) -> None: ...

class ColorJitterSpec(_message.Message):
    __slots__ = ["brightness", "contrast", "hue", "saturation"]
    BRIGHTNESS_FIELD_NUMBER: _ClassVar[int]
    CONTRAST_FIELD_NUMBER: _ClassVar[int]
    HUE_FIELD_NUMBER: _ClassVar[int]
    SATURATION_FIELD_NUMBER: _ClassVar[int]
    brightness: float
    contrast: float
    hue: float
    saturation: float
    def __init__(self, brightness: _Optional[float] = ..., contrast: _Optional[float] = ..., saturation: _Optional[float] = ..., hue: _Optional[float] = ...) -> None: ...

class DatasetSpec(_message.Message):
    __slots__ = ["allow_missing_classes", "augmentation", "device_budget_bytes", "image_folder", "limit_test", "limit_train", "mean", "name", "placement", "root", "std", "subset", "synthetic", "validation"]
    ALLOW_MISSING_CLASSES_FIELD_NUMBER: _ClassVar[int]
    AUGMENTATION_FIELD_NUMBER: _ClassVar[int]
    DEVICE_BUDGET_BYTES_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FOLDER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_TEST_FIELD_NUMBER: _ClassVar[int]
    LIMIT_TRAIN_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    ROOT_FIELD_NUMBER: _ClassVar[int]
    STD_FIELD_NUMBER: _ClassVar[int]
    SUBSET_FIELD_NUMBER: _ClassVar[int]
    SYNTHETIC_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_FIELD_NUMBER: _ClassVar[int]
    allow_missing_classes: bool
    augmentation: AugmentationSpec
    device_budget_bytes: int
    image_folder: ImageFolderSpec
    limit_test: int
    limit_train: int
    mean: _containers.RepeatedScalarFieldContainer[float]
    name: str
    placement: str
    root: str
    std: _containers.RepeatedScalarFieldContainer[float]
    subset: str
    synthetic: SyntheticSpec
    validation: ValidationSpec
    def __init__(self, name: _Optional[str] = ..., root: _Optional[str] = ..., limit_train: _Optional[int] = ..., limit_test: _Optional[int] = ..., augmentation: _Optional[_Union[AugmentationSpec, _Mapping]] = ..., synthetic: _Optional[_Union[SyntheticSpec, _Mapping]] = ..., image_folder: _Optional[_Union[ImageFolderSpec, _Mapping]] = ..., mean: _Optional[_Iterable[float]] = ..., std: _Optional[_Iterable[float]] = ..., placement: _Optional[str] = ..., device_budget_bytes: _Optional[int] = ..., subset: _Optional[str] = ..., allow_missing_classes: bool = ..., validation: _Optional[_Union[ValidationSpec, _Mapping]] = ...) -> None: ...

class DeleteArtifactsRequest(_message.Message):
    __slots__ = ["dry_run", "job_ids", "retention_policy"]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_POLICY_FIELD_NUMBER: _ClassVar[int]
    dry_run: bool
    job_ids: _containers.RepeatedScalarFieldContainer[str]
    retention_policy: bool
    def __init__(self, job_ids: _Optional[_Iterable[str]] = ..., retention_policy: bool = ..., dry_run: bool = ...) -> None: ...

class DeleteArtifactsResponse(_message.Message):
    __slots__ = ["artifacts_bytes", "deleted", "freed_bytes"]
    class Deleted(_message.Message):
        __slots__ = ["bytes", "files", "job_id", "reason"]
        BYTES_FIELD_NUMBER: _ClassVar[int]
        FILES_FIELD_NUMBER: _ClassVar[int]
        JOB_ID_FIELD_NUMBER: _ClassVar[int]
        REASON_FIELD_NUMBER: _ClassVar[int]
        bytes: int
        files: int
        job_id: str
        reason: str
        def __init__(self, job_id: _Optional[str] = ..., bytes: _Optional[int] = ..., files: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...
    ARTIFACTS_BYTES_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    FREED_BYTES_FIELD_NUMBER: _ClassVar[int]
    artifacts_bytes: int
    deleted: _containers.RepeatedCompositeFieldContainer[DeleteArtifactsResponse.Deleted]
    freed_bytes: int
    def __init__(self, deleted: _Optional[_Iterable[_Union[DeleteArtifactsResponse.Deleted, _Mapping]]] = ..., freed_bytes: _Optional[int] = ..., artifacts_bytes: _Optional[int] = ...) -> None: ...

class DeleteUploadRequest(_message.Message):
    __slots__ = ["name", "submitter"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SUBMITTER_FIELD_NUMBER: _ClassVar[int]
    name: str
    submitter: str
    def __init__(self, name: _Optional[str] = ..., submitter: _Optional[str] = ...) -> None: ...

class DeviceInfo(_message.Message):
    __slots__ = ["allocated_bytes", "available", "baseline_allocated_bytes", "baseline_reserved_bytes", "cpu_threads", "executor_jobs_run", "executor_pid", "executor_restarts", "executor_uptime_s", "jobs_run", "kind", "name", "reserved_bytes", "torch_version", "total_memory_bytes"]
    ALLOCATED_BYTES_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    BASELINE_ALLOCATED_BYTES_FIELD_NUMBER: _ClassVar[int]
    BASELINE_RESERVED_BYTES_FIELD_NUMBER: _ClassVar[int]
    CPU_THREADS_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_JOBS_RUN_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_PID_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    JOBS_RUN_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    RESERVED_BYTES_FIELD_NUMBER: _ClassVar[int]
    TORCH_VERSION_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    allocated_bytes: int
    available: _containers.RepeatedScalarFieldContainer[str]
    baseline_allocated_bytes: int
    baseline_reserved_bytes: int
    cpu_threads: int
    executor_jobs_run: int
    executor_pid: int
    executor_restarts: int
    executor_uptime_s: float
    jobs_run: int
    kind: str
    name: str
    reserved_bytes: int
    torch_version: str
    total_memory_bytes: int
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., total_memory_bytes: _Optional[int] = ..., allocated_bytes: _Optional[int] = ..., reserved_bytes: _Optional[int] = ..., available: _Optional[_Iterable[str]] = ..., torch_version: _Optional[str] = ..., cpu_threads: _Optional[int] = ..., jobs_run: _Optional[int] = ..., baseline_allocated_bytes: _Optional[int] = ..., baseline_reserved_bytes: _Optional[int] = ..., executor_pid: _Optional[int] = ..., executor_uptime_s: _Optional[float] = ..., executor_jobs_run: _Optional[int] = ..., executor_restarts: _Optional[int] = ...) -> None: ...

class DistributedSpec(_message.Message):
    __slots__ = ["backend", "devices", "master_addr", "master_port", "nnodes", "node_rank", "nproc_per_node", "timeout_s"]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    MASTER_PORT_FIELD_NUMBER: _ClassVar[int]
    NNODES_FIELD_NUMBER: _ClassVar[int]
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    NPROC_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    backend: str
    devices: _containers.RepeatedScalarFieldContainer[str]
    master_addr: str
    master_port: int
    nnodes: int
    node_rank: int
    nproc_per_node: int
    timeout_s: float
    def __init__(self, nproc_per_node: _Optional[int] = ..., nnodes: _Optional[int] = ..., node_rank: _Optional[int] = ..., master_addr: _Optional[str] = ..., master_port: _Optional[int] = ..., backend: _Optional[str] = ..., devices: _Optional[_Iterable[str]] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class EarlyStoppingSpec(_message.Message):
    __slots__ = ["min_delta", "mode", "monitor", "patience"]
    MIN_DELTA_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    MONITOR_FIELD_NUMBER: _ClassVar[int]
    PATIENCE_FIELD_NUMBER: _ClassVar[int]
    min_delta: float
    mode: str
    monitor: str
    patience: int
    def __init__(self, monitor: _Optional[str] = ..., mode: _Optional[str] = ..., patience: _Optional[int] = ..., min_delta: _Optional[float] = ...) -> None: ...

class EpochMetrics(_message.Message):
    __slots__ = ["epoch", "epoch_time_s", "evaluated", "learning_rate", "metrics", "samples_per_second", "skipped_steps", "test_accuracy", "test_loss", "train_accuracy", "train_loss", "val_accuracy", "val_loss"]
    class MetricsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    EPOCH_TIME_S_FIELD_NUMBER: _ClassVar[int]
    EVALUATED_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_STEPS_FIELD_NUMBER: _ClassVar[int]
    TEST_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    TEST_LOSS_FIELD_NUMBER: _ClassVar[int]
    TRAIN_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    TRAIN_LOSS_FIELD_NUMBER: _ClassVar[int]
    VAL_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    VAL_LOSS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    epoch_time_s: float
    evaluated: bool
    learning_rate: float
    metrics: _containers.ScalarMap[str, float]
    samples_per_second: float
    skipped_steps: int
    test_accuracy: float
    test_loss: float
    train_accuracy: float
    train_loss: float
    val_accuracy: float
    val_loss: float
    def __init__(self, epoch: _Optional[int] = ..., train_loss: _Optional[float] = ..., train_accuracy: _Optional[float] = ..., test_loss: _Optional[float] = ..., test_accuracy: _Optional[float] = ..., epoch_time_s: _Optional[float] = ..., samples_per_second: _Optional[float] = ..., evaluated: bool = ..., learning_rate: _Optional[float] = ..., val_loss: _Optional[float] = ..., val_accuracy: _Optional[float] = ..., skipped_steps: _Optional[int] = ..., metrics: _Optional[_Mapping[str, float]] = ...) -> None: ...

class EvalJob(_message.Message):
    __slots__ = ["batch_size", "dataset", "device", "model", "split"]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    batch_size: int
    dataset: DatasetSpec
    device: str
    model: str
    split: str
    def __init__(self, model: _Optional[str] = ..., dataset: _Optional[_Union[DatasetSpec, _Mapping]] = ..., split: _Optional[str] = ..., batch_size: _Optional[int] = ..., device: _Optional[str] = ...) -> None: ...

class FaultInjection(_message.Message):
    __slots__ = ["at_step", "kind", "steps"]
    AT_STEP_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    at_step: int
    kind: str
    steps: int
    def __init__(self, kind: _Optional[str] = ..., at_step: _Optional[int] = ..., steps: _Optional[int] = ...) -> None: ...

class GetArtifactRequest(_message.Message):
    __slots__ = ["job_id", "name", "offset"]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    name: str
    offset: int
    def __init__(self, job_id: _Optional[str] = ..., name: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...

class GetDeviceRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ["job_id"]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetServerStatusRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class GetUploadStatusRequest(_message.Message):
    __slots__ = ["name", "sha256", "size_bytes"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    sha256: str
    size_bytes: int
    def __init__(self, name: _Optional[str] = ..., sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ["queue_position", "state"]
    QUEUE_POSITION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    queue_position: int
    state: Job.State
    def __init__(self, state: _Optional[_Union[Job.State, str]] = ..., queue_position: _Optional[int] = ...) -> None: ...

class ImageFolderSpec(_message.Message):
    __slots__ = ["channels", "decode_threads", "image_size", "on_bad_image"]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    DECODE_THREADS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    ON_BAD_IMAGE_FIELD_NUMBER: _ClassVar[int]
    channels: int
    decode_threads: int
    image_size: _containers.RepeatedScalarFieldContainer[int]
    on_bad_image: str
    def __init__(self, image_size: _Optional[_Iterable[int]] = ..., channels: _Optional[int] = ..., on_bad_image: _Optional[str] = ..., decode_threads: _Optional[int] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ["created_at", "effective_spec", "failure_reason", "finished_at", "id", "kind", "last_checkpoint", "last_epoch", "last_seq", "last_step", "message", "priority", "resumed_from_job_id", "spec", "started_at", "state", "submitted_by", "summary", "trial", "trial_job_ids"]
    class FailureReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = []
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = []
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = []
    BENCH_JOB: Job.Kind
    CANCELLED: Job.State
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    DATASET_ERROR: Job.FailureReason
    DEPENDENCY_FAILED: Job.FailureReason
    DISK_FULL: Job.FailureReason
    DIVERGED: Job.FailureReason
    EARLY_STOPPED: Job.FailureReason
    EFFECTIVE_SPEC_FIELD_NUMBER: _ClassVar[int]
    EVAL_JOB: Job.Kind
    EXECUTOR_CRASHED: Job.FailureReason
    FAILED: Job.State
    FAILURE_REASON_FIELD_NUMBER: _ClassVar[int]
    FAILURE_REASON_UNSPECIFIED: Job.FailureReason
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    INTERNAL: Job.FailureReason
    INTERRUPTED: Job.State
    INVALID_SPEC: Job.FailureReason
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_UNSPECIFIED: Job.Kind
    LAST_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    LAST_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OUT_OF_MEMORY: Job.FailureReason
    PREDICT_JOB: Job.Kind
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    QUEUED: Job.State
    RESUMED_FROM_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RUNNING: Job.State
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_UNSPECIFIED: Job.State
    SUBMITTED_BY_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED: Job.State
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    SWEEP: Job.Kind
    TRAIN_JOB: Job.Kind
    TRIAL_FIELD_NUMBER: _ClassVar[int]
    TRIAL_JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    USER_CODE_TIMEOUT: Job.FailureReason
    created_at: _timestamp_pb2.Timestamp
    effective_spec: SubmitJobRequest
    failure_reason: Job.FailureReason
    finished_at: _timestamp_pb2.Timestamp
    id: str
    kind: Job.Kind
    last_checkpoint: CheckpointSaved
    last_epoch: EpochMetrics
    last_seq: int
    last_step: StepMetrics
    message: str
    priority: int
    resumed_from_job_id: str
    spec: SubmitJobRequest
    started_at: _timestamp_pb2.Timestamp
    state: Job.State
    submitted_by: str
    summary: JobSummary
    trial: SweepTrial
    trial_job_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[_Union[Job.Kind, str]] = ..., state: _Optional[_Union[Job.State, str]] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., spec: _Optional[_Union[SubmitJobRequest, _Mapping]] = ..., failure_reason: _Optional[_Union[Job.FailureReason, str]] = ..., message: _Optional[str] = ..., resumed_from_job_id: _Optional[str] = ..., last_seq: _Optional[int] = ..., last_step: _Optional[_Union[StepMetrics, _Mapping]] = ..., last_epoch: _Optional[_Union[EpochMetrics, _Mapping]] = ..., summary: _Optional[_Union[JobSummary, _Mapping]] = ..., last_checkpoint: _Optional[_Union[CheckpointSaved, _Mapping]] = ..., submitted_by: _Optional[str] = ..., priority: _Optional[int] = ..., trial: _Optional[_Union[SweepTrial, _Mapping]] = ..., trial_job_ids: _Optional[_Iterable[str]] = ..., effective_spec: _Optional[_Union[SubmitJobRequest, _Mapping]] = ...) -> None: ...

class JobEvent(_message.Message):
    __slots__ = ["bench_row", "checkpoint", "epoch", "heartbeat", "job_id", "log", "prediction", "seq", "state", "step", "summary", "time"]
    BENCH_ROW_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_FIELD_NUMBER: _ClassVar[int]
    PREDICTION_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    bench_row: BenchRow
    checkpoint: CheckpointSaved
    epoch: EpochMetrics
    heartbeat: Heartbeat
    job_id: str
    log: LogLine
    prediction: Prediction
    seq: int
    state: StateChange
    step: StepMetrics
    summary: JobSummary
    time: _timestamp_pb2.Timestamp
    def __init__(self, job_id: _Optional[str] = ..., seq: _Optional[int] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., state: _Optional[_Union[StateChange, _Mapping]] = ..., step: _Optional[_Union[StepMetrics, _Mapping]] = ..., epoch: _Optional[_Union[EpochMetrics, _Mapping]] = ..., log: _Optional[_Union[LogLine, _Mapping]] = ..., summary: _Optional[_Union[JobSummary, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., bench_row: _Optional[_Union[BenchRow, _Mapping]] = ..., checkpoint: _Optional[_Union[CheckpointSaved, _Mapping]] = ..., prediction: _Optional[_Union[Prediction, _Mapping]] = ...) -> None: ...

class JobSummary(_message.Message):
    __slots__ = ["bench_rows", "best_epoch", "best_model_path", "best_value", "checkpoint_path", "class_names", "confusion_classes", "confusion_matrix", "data_load_time_s", "data_placement", "device", "epochs", "eval_examples", "eval_model", "eval_model_job_id", "eval_split", "executor_pid", "executor_restart_reason", "final_loss_scale", "final_train_loss", "forward_time_ms", "median_epoch_time_s", "memory", "metrics", "model_check_path", "model_format", "model_json_path", "model_path", "model_state_dict_path", "monitor", "optimizer", "parameters", "precision", "predictions", "profile_first_step", "profile_last_step", "profile_path", "resumed_at_step", "samples_per_second", "schedule", "skipped_images", "skipped_steps", "steps", "stop_reason", "task", "test_accuracy", "test_examples", "test_loss", "total_time_s", "train_class_counts", "train_examples", "val_accuracy", "val_examples", "val_loss", "validation"]
    class MetricsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    BENCH_ROWS_FIELD_NUMBER: _ClassVar[int]
    BEST_EPOCH_FIELD_NUMBER: _ClassVar[int]
    BEST_MODEL_PATH_FIELD_NUMBER: _ClassVar[int]
    BEST_VALUE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_PATH_FIELD_NUMBER: _ClassVar[int]
    CLASS_NAMES_FIELD_NUMBER: _ClassVar[int]
    CONFUSION_CLASSES_FIELD_NUMBER: _ClassVar[int]
    CONFUSION_MATRIX_FIELD_NUMBER: _ClassVar[int]
    DATA_LOAD_TIME_S_FIELD_NUMBER: _ClassVar[int]
    DATA_PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    EVAL_EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    EVAL_MODEL_FIELD_NUMBER: _ClassVar[int]
    EVAL_MODEL_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EVAL_SPLIT_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_PID_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_RESTART_REASON_FIELD_NUMBER: _ClassVar[int]
    FINAL_LOSS_SCALE_FIELD_NUMBER: _ClassVar[int]
    FINAL_TRAIN_LOSS_FIELD_NUMBER: _ClassVar[int]
    FORWARD_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    MEDIAN_EPOCH_TIME_S_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    MODEL_CHECK_PATH_FIELD_NUMBER: _ClassVar[int]
    MODEL_FORMAT_FIELD_NUMBER: _ClassVar[int]
    MODEL_JSON_PATH_FIELD_NUMBER: _ClassVar[int]
    MODEL_PATH_FIELD_NUMBER: _ClassVar[int]
    MODEL_STATE_DICT_PATH_FIELD_NUMBER: _ClassVar[int]
    MONITOR_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    PREDICTIONS_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIRST_STEP_FIELD_NUMBER: _ClassVar[int]
    PROFILE_LAST_STEP_FIELD_NUMBER: _ClassVar[int]
    PROFILE_PATH_FIELD_NUMBER: _ClassVar[int]
    RESUMED_AT_STEP_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_IMAGES_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_STEPS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    TEST_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    TEST_EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    TEST_LOSS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TIME_S_FIELD_NUMBER: _ClassVar[int]
    TRAIN_CLASS_COUNTS_FIELD_NUMBER: _ClassVar[int]
    TRAIN_EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_FIELD_NUMBER: _ClassVar[int]
    VAL_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    VAL_EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    VAL_LOSS_FIELD_NUMBER: _ClassVar[int]
    bench_rows: _containers.RepeatedCompositeFieldContainer[BenchRow]
    best_epoch: int
    best_model_path: str
    best_value: float
    checkpoint_path: str
    class_names: _containers.RepeatedScalarFieldContainer[str]
    confusion_classes: int
    confusion_matrix: _containers.RepeatedScalarFieldContainer[int]
    data_load_time_s: float
    data_placement: str
    device: str
    epochs: int
    eval_examples: int
    eval_model: str
    eval_model_job_id: str
    eval_split: str
    executor_pid: int
    executor_restart_reason: str
    final_loss_scale: float
    final_train_loss: float
    forward_time_ms: float
    median_epoch_time_s: float
    memory: MemoryStats
    metrics: _containers.ScalarMap[str, float]
    model_check_path: str
    model_format: str
    model_json_path: str
    model_path: str
    model_state_dict_path: str
    monitor: str
    optimizer: str
    parameters: int
    precision: str
    predictions: _containers.RepeatedCompositeFieldContainer[Prediction]
    profile_first_step: int
    profile_last_step: int
    profile_path: str
    resumed_at_step: int
    samples_per_second: float
    schedule: str
    skipped_images: int
    skipped_steps: int
    steps: int
    stop_reason: str
    task: str
    test_accuracy: float
    test_examples: int
    test_loss: float
    total_time_s: float
    train_class_counts: _containers.RepeatedScalarFieldContainer[int]
    train_examples: int
    val_accuracy: float
    val_examples: int
    val_loss: float
    validation: str
    def __init__(self, device: _Optional[str] = ..., epochs: _Optional[int] = ..., steps: _Optional[int] = ..., final_train_loss: _Optional[float] = ..., test_loss: _Optional[float] = ..., test_accuracy: _Optional[float] = ..., total_time_s: _Optional[float] = ..., median_epoch_time_s: _Optional[float] = ..., samples_per_second: _Optional[float] = ..., memory: _Optional[_Union[MemoryStats, _Mapping]] = ..., train_examples: _Optional[int] = ..., test_examples: _Optional[int] = ..., parameters: _Optional[int] = ..., data_load_time_s: _Optional[float] = ..., model_path: _Optional[str] = ..., model_format: _Optional[str] = ..., checkpoint_path: _Optional[str] = ..., skipped_steps: _Optional[int] = ..., final_loss_scale: _Optional[float] = ..., resumed_at_step: _Optional[int] = ..., optimizer: _Optional[str] = ..., schedule: _Optional[str] = ..., precision: _Optional[str] = ..., bench_rows: _Optional[_Iterable[_Union[BenchRow, _Mapping]]] = ..., executor_pid: _Optional[int] = ..., executor_restart_reason: _Optional[str] = ..., class_names: _Optional[_Iterable[str]] = ..., data_placement: _Optional[str] = ..., skipped_images: _Optional[int] = ..., profile_path: _Optional[str] = ..., profile_first_step: _Optional[int] = ..., profile_last_step: _Optional[int] = ..., train_class_counts: _Optional[_Iterable[int]] = ..., val_loss: _Optional[float] = ..., val_accuracy: _Optional[float] = ..., val_examples: _Optional[int] = ..., validation: _Optional[str] = ..., stop_reason: _Optional[str] = ..., monitor: _Optional[str] = ..., best_epoch: _Optional[int] = ..., best_value: _Optional[float] = ..., best_model_path: _Optional[str] = ..., model_json_path: _Optional[str] = ..., model_state_dict_path: _Optional[str] = ..., model_check_path: _Optional[str] = ..., metrics: _Optional[_Mapping[str, float]] = ..., task: _Optional[str] = ..., eval_split: _Optional[str] = ..., eval_examples: _Optional[int] = ..., confusion_matrix: _Optional[_Iterable[int]] = ..., confusion_classes: _Optional[int] = ..., eval_model: _Optional[str] = ..., eval_model_job_id: _Optional[str] = ..., predictions: _Optional[_Iterable[_Union[Prediction, _Mapping]]] = ..., forward_time_ms: _Optional[float] = ...) -> None: ...

class ListArtifactsRequest(_message.Message):
    __slots__ = ["job_id"]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ListArtifactsResponse(_message.Message):
    __slots__ = ["artifacts"]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    artifacts: _containers.RepeatedCompositeFieldContainer[Artifact]
    def __init__(self, artifacts: _Optional[_Iterable[_Union[Artifact, _Mapping]]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ["created_after", "kind", "labels", "name", "page_size", "page_token", "states"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CREATED_AFTER_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    created_after: _timestamp_pb2.Timestamp
    kind: Job.Kind
    labels: _containers.ScalarMap[str, str]
    name: str
    page_size: int
    page_token: str
    states: _containers.RepeatedScalarFieldContainer[Job.State]
    def __init__(self, states: _Optional[_Iterable[_Union[Job.State, str]]] = ..., kind: _Optional[_Union[Job.Kind, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., created_after: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ["jobs", "next_page_token"]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ["input_shape", "num_classes"]
    INPUT_SHAPE_FIELD_NUMBER: _ClassVar[int]
    NUM_CLASSES_FIELD_NUMBER: _ClassVar[int]
    input_shape: _containers.RepeatedScalarFieldContainer[int]
    num_classes: int
    def __init__(self, input_shape: _Optional[_Iterable[int]] = ..., num_classes: _Optional[int] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ["models"]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ...) -> None: ...

class ListUploadsRequest(_message.Message):
    __slots__ = ["all", "submitter"]
    ALL_FIELD_NUMBER: _ClassVar[int]
    SUBMITTER_FIELD_NUMBER: _ClassVar[int]
    all: bool
    submitter: str
    def __init__(self, all: bool = ..., submitter: _Optional[str] = ...) -> None: ...

class ListUploadsResponse(_message.Message):
    __slots__ = ["quota_bytes", "uploads", "used_bytes"]
    QUOTA_BYTES_FIELD_NUMBER: _ClassVar[int]
    UPLOADS_FIELD_NUMBER: _ClassVar[int]
    USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    quota_bytes: int
    uploads: _containers.RepeatedCompositeFieldContainer[Upload]
    used_bytes: int
    def __init__(self, uploads: _Optional[_Iterable[_Union[Upload, _Mapping]]] = ..., used_bytes: _Optional[int] = ..., quota_bytes: _Optional[int] = ...) -> None: ...

class LogLine(_message.Message):
    __slots__ = ["level", "text"]
    class Level(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = []
    ERROR: LogLine.Level
    INFO: LogLine.Level
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    LEVEL_UNSPECIFIED: LogLine.Level
    TEXT_FIELD_NUMBER: _ClassVar[int]
    WARNING: LogLine.Level
    level: LogLine.Level
    text: str
    def __init__(self, level: _Optional[_Union[LogLine.Level, str]] = ..., text: _Optional[str] = ...) -> None: ...

class LossSpec(_message.Message):
    __slots__ = ["beta", "class_weights", "delta", "pos_weight", "torchscript", "type"]
    BETA_FIELD_NUMBER: _ClassVar[int]
    CLASS_WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    POS_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    TORCHSCRIPT_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    beta: float
    class_weights: _containers.RepeatedScalarFieldContainer[float]
    delta: float
    pos_weight: _containers.RepeatedScalarFieldContainer[float]
    torchscript: str
    type: str
    def __init__(self, type: _Optional[str] = ..., beta: _Optional[float] = ..., delta: _Optional[float] = ..., pos_weight: _Optional[_Iterable[float]] = ..., class_weights: _Optional[_Iterable[float]] = ..., torchscript: _Optional[str] = ...) -> None: ...

class MemoryStats(_message.Message):
    __slots__ = ["allocated_after_bytes", "allocated_before_bytes", "baseline_allocated_bytes", "baseline_reserved_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "reserved_after_bytes", "reserved_before_bytes"]
    ALLOCATED_AFTER_BYTES_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_BEFORE_BYTES_FIELD_NUMBER: _ClassVar[int]
    BASELINE_ALLOCATED_BYTES_FIELD_NUMBER: _ClassVar[int]
    BASELINE_RESERVED_BYTES_FIELD_NUMBER: _ClassVar[int]
    PEAK_ALLOCATED_BYTES_FIELD_NUMBER: _ClassVar[int]
    PEAK_RESERVED_BYTES_FIELD_NUMBER: _ClassVar[int]
    RESERVED_AFTER_BYTES_FIELD_NUMBER: _ClassVar[int]
    RESERVED_BEFORE_BYTES_FIELD_NUMBER: _ClassVar[int]
    allocated_after_bytes: int
    allocated_before_bytes: int
    baseline_allocated_bytes: int
    baseline_reserved_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    reserved_after_bytes: int
    reserved_before_bytes: int
    def __init__(self, allocated_before_bytes: _Optional[int] = ..., peak_allocated_bytes: _Optional[int] = ..., allocated_after_bytes: _Optional[int] = ..., reserved_before_bytes: _Optional[int] = ..., reserved_after_bytes: _Optional[int] = ..., peak_reserved_bytes: _Optional[int] = ..., baseline_allocated_bytes: _Optional[int] = ..., baseline_reserved_bytes: _Optional[int] = ...) -> None: ...

class MetricSpec(_message.Message):
    __slots__ = ["name", "reduction", "torchscript"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REDUCTION_FIELD_NUMBER: _ClassVar[int]
    TORCHSCRIPT_FIELD_NUMBER: _ClassVar[int]
    name: str
    reduction: str
    torchscript: str
    def __init__(self, name: _Optional[str] = ..., torchscript: _Optional[str] = ..., reduction: _Optional[str] = ...) -> None: ...

class MixSpec(_message.Message):
    __slots__ = ["alpha"]
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    alpha: float
    def __init__(self, alpha: _Optional[float] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ["description", "input_shape", "name", "num_classes", "parameters", "presets", "unsupported"]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SHAPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NUM_CLASSES_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    PRESETS_FIELD_NUMBER: _ClassVar[int]
    UNSUPPORTED_FIELD_NUMBER: _ClassVar[int]
    description: str
    input_shape: _containers.RepeatedScalarFieldContainer[int]
    name: str
    num_classes: int
    parameters: int
    presets: _containers.RepeatedScalarFieldContainer[str]
    unsupported: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters: _Optional[int] = ..., input_shape: _Optional[_Iterable[int]] = ..., num_classes: _Optional[int] = ..., presets: _Optional[_Iterable[str]] = ..., unsupported: _Optional[str] = ...) -> None: ...

class ModelSpec(_message.Message):
    __slots__ = ["dropout", "name", "num_classes", "preset", "strict", "torchscript", "weights"]
    DROPOUT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NUM_CLASSES_FIELD_NUMBER: _ClassVar[int]
    PRESET_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    TORCHSCRIPT_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    dropout: float
    name: str
    num_classes: int
    preset: str
    strict: bool
    torchscript: str
    weights: str
    def __init__(self, name: _Optional[str] = ..., num_classes: _Optional[int] = ..., preset: _Optional[str] = ..., torchscript: _Optional[str] = ..., dropout: _Optional[float] = ..., weights: _Optional[str] = ..., strict: bool = ...) -> None: ...

class MoveJobRequest(_message.Message):
    __slots__ = ["job_id", "priority"]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    priority: int
    def __init__(self, job_id: _Optional[str] = ..., priority: _Optional[int] = ...) -> None: ...

class OptimizerSpec(_message.Message):
    __slots__ = ["betas", "eps", "learning_rate", "momentum", "name", "nesterov", "weight_decay"]
    BETAS_FIELD_NUMBER: _ClassVar[int]
    EPS_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    MOMENTUM_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NESTEROV_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    betas: _containers.RepeatedScalarFieldContainer[float]
    eps: float
    learning_rate: float
    momentum: float
    name: str
    nesterov: bool
    weight_decay: float
    def __init__(self, name: _Optional[str] = ..., learning_rate: _Optional[float] = ..., weight_decay: _Optional[float] = ..., momentum: _Optional[float] = ..., nesterov: bool = ..., betas: _Optional[_Iterable[float]] = ..., eps: _Optional[float] = ...) -> None: ...

class ParamGroupSpec(_message.Message):
    __slots__ = ["learning_rate", "prefix", "weight_decay"]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    learning_rate: float
    prefix: str
    weight_decay: float
    def __init__(self, prefix: _Optional[str] = ..., learning_rate: _Optional[float] = ..., weight_decay: _Optional[float] = ...) -> None: ...

class PauseQueueRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class PredictJob(_message.Message):
    __slots__ = ["device", "inputs", "model", "top_k"]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    device: str
    inputs: _containers.RepeatedScalarFieldContainer[str]
    model: str
    top_k: int
    def __init__(self, model: _Optional[str] = ..., inputs: _Optional[_Iterable[str]] = ..., top_k: _Optional[int] = ..., device: _Optional[str] = ...) -> None: ...

class Prediction(_message.Message):
    __slots__ = ["class_names", "classes", "index", "input", "probabilities", "values"]
    CLASSES_FIELD_NUMBER: _ClassVar[int]
    CLASS_NAMES_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    PROBABILITIES_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    class_names: _containers.RepeatedScalarFieldContainer[str]
    classes: _containers.RepeatedScalarFieldContainer[int]
    index: int
    input: str
    probabilities: _containers.RepeatedScalarFieldContainer[float]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, input: _Optional[str] = ..., index: _Optional[int] = ..., classes: _Optional[_Iterable[int]] = ..., probabilities: _Optional[_Iterable[float]] = ..., class_names: _Optional[_Iterable[str]] = ..., values: _Optional[_Iterable[float]] = ...) -> None: ...

class ProfileSpec(_message.Message):
    __slots__ = ["start_step", "steps"]
    START_STEP_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    start_step: int
    steps: int
    def __init__(self, start_step: _Optional[int] = ..., steps: _Optional[int] = ...) -> None: ...

class RandomErasingSpec(_message.Message):
    __slots__ = ["p", "ratio", "scale", "value"]
    P_FIELD_NUMBER: _ClassVar[int]
    RATIO_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    p: float
    ratio: _containers.RepeatedScalarFieldContainer[float]
    scale: _containers.RepeatedScalarFieldContainer[float]
    value: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, p: _Optional[float] = ..., scale: _Optional[_Iterable[float]] = ..., ratio: _Optional[_Iterable[float]] = ..., value: _Optional[_Iterable[float]] = ...) -> None: ...

class RandomResizedCropSpec(_message.Message):
    __slots__ = ["ratio", "scale", "size"]
    RATIO_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    ratio: _containers.RepeatedScalarFieldContainer[float]
    scale: _containers.RepeatedScalarFieldContainer[float]
    size: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, size: _Optional[_Iterable[int]] = ..., scale: _Optional[_Iterable[float]] = ..., ratio: _Optional[_Iterable[float]] = ...) -> None: ...

class RandomRotationSpec(_message.Message):
    __slots__ = ["degrees"]
    DEGREES_FIELD_NUMBER: _ClassVar[int]
    degrees: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, degrees: _Optional[_Iterable[float]] = ...) -> None: ...

class RandomSearch(_message.Message):
    __slots__ = ["parameters", "seed", "trials"]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    TRIALS_FIELD_NUMBER: _ClassVar[int]
    parameters: _containers.RepeatedCompositeFieldContainer[SweepParameter]
    seed: int
    trials: int
    def __init__(self, trials: _Optional[int] = ..., seed: _Optional[int] = ..., parameters: _Optional[_Iterable[_Union[SweepParameter, _Mapping]]] = ...) -> None: ...

class ResumeQueueRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ScheduleSpec(_message.Message):
    __slots__ = ["anneal_strategy", "base_momentum", "cycle_momentum", "div_factor", "final_div_factor", "gamma", "max_lr", "max_momentum", "min_lr", "name", "pct_start", "step_size_epochs", "warmup_epochs", "warmup_steps"]
    ANNEAL_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    BASE_MOMENTUM_FIELD_NUMBER: _ClassVar[int]
    CYCLE_MOMENTUM_FIELD_NUMBER: _ClassVar[int]
    DIV_FACTOR_FIELD_NUMBER: _ClassVar[int]
    FINAL_DIV_FACTOR_FIELD_NUMBER: _ClassVar[int]
    GAMMA_FIELD_NUMBER: _ClassVar[int]
    MAX_LR_FIELD_NUMBER: _ClassVar[int]
    MAX_MOMENTUM_FIELD_NUMBER: _ClassVar[int]
    MIN_LR_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PCT_START_FIELD_NUMBER: _ClassVar[int]
    STEP_SIZE_EPOCHS_FIELD_NUMBER: _ClassVar[int]
    WARMUP_EPOCHS_FIELD_NUMBER: _ClassVar[int]
    WARMUP_STEPS_FIELD_NUMBER: _ClassVar[int]
    anneal_strategy: str
    base_momentum: float
    cycle_momentum: bool
    div_factor: float
    final_div_factor: float
    gamma: float
    max_lr: float
    max_momentum: float
    min_lr: float
    name: str
    pct_start: float
    step_size_epochs: int
    warmup_epochs: float
    warmup_steps: int
    def __init__(self, name: _Optional[str] = ..., step_size_epochs: _Optional[int] = ..., gamma: _Optional[float] = ..., warmup_steps: _Optional[int] = ..., warmup_epochs: _Optional[float] = ..., min_lr: _Optional[float] = ..., max_lr: _Optional[float] = ..., pct_start: _Optional[float] = ..., div_factor: _Optional[float] = ..., final_div_factor: _Optional[float] = ..., anneal_strategy: _Optional[str] = ..., cycle_momentum: bool = ..., base_momentum: _Optional[float] = ..., max_momentum: _Optional[float] = ...) -> None: ...

class ServerStatus(_message.Message):
    __slots__ = ["artifacts_bytes", "artifacts_deleted_bytes", "commit_time_s", "event_commits", "event_watches", "events_pending", "events_stored", "heartbeat_interval_s", "http_url", "jobs_total", "min_keepalive_interval_s", "open_streams", "queue_paused", "queued_jobs", "rss_bytes", "running_job_id", "uptime_s"]
    ARTIFACTS_BYTES_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_DELETED_BYTES_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TIME_S_FIELD_NUMBER: _ClassVar[int]
    EVENTS_PENDING_FIELD_NUMBER: _ClassVar[int]
    EVENTS_STORED_FIELD_NUMBER: _ClassVar[int]
    EVENT_COMMITS_FIELD_NUMBER: _ClassVar[int]
    EVENT_WATCHES_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    HTTP_URL_FIELD_NUMBER: _ClassVar[int]
    JOBS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    MIN_KEEPALIVE_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    OPEN_STREAMS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_JOBS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_PAUSED_FIELD_NUMBER: _ClassVar[int]
    RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    RUNNING_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    artifacts_bytes: int
    artifacts_deleted_bytes: int
    commit_time_s: float
    event_commits: int
    event_watches: int
    events_pending: int
    events_stored: int
    heartbeat_interval_s: float
    http_url: str
    jobs_total: int
    min_keepalive_interval_s: float
    open_streams: int
    queue_paused: bool
    queued_jobs: int
    rss_bytes: int
    running_job_id: str
    uptime_s: float
    def __init__(self, open_streams: _Optional[int] = ..., event_watches: _Optional[int] = ..., queued_jobs: _Optional[int] = ..., running_job_id: _Optional[str] = ..., jobs_total: _Optional[int] = ..., rss_bytes: _Optional[int] = ..., uptime_s: _Optional[float] = ..., events_stored: _Optional[int] = ..., event_commits: _Optional[int] = ..., commit_time_s: _Optional[float] = ..., events_pending: _Optional[int] = ..., heartbeat_interval_s: _Optional[float] = ..., min_keepalive_interval_s: _Optional[float] = ..., http_url: _Optional[str] = ..., queue_paused: bool = ..., artifacts_bytes: _Optional[int] = ..., artifacts_deleted_bytes: _Optional[int] = ...) -> None: ...

class StateChange(_message.Message):
    __slots__ = ["failure_reason", "message", "state"]
    FAILURE_REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    failure_reason: Job.FailureReason
    message: str
    state: Job.State
    def __init__(self, state: _Optional[_Union[Job.State, str]] = ..., failure_reason: _Optional[_Union[Job.FailureReason, str]] = ..., message: _Optional[str] = ...) -> None: ...

class StepMetrics(_message.Message):
    __slots__ = ["accuracy", "allocated_bytes", "batch_size", "epoch", "learning_rate", "loss", "loss_scale", "samples_per_second", "skipped", "step", "step_time_ms", "total_steps"]
    ACCURACY_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_BYTES_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    LOSS_SCALE_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    STEP_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    accuracy: float
    allocated_bytes: int
    batch_size: int
    epoch: int
    learning_rate: float
    loss: float
    loss_scale: float
    samples_per_second: float
    skipped: bool
    step: int
    step_time_ms: float
    total_steps: int
    def __init__(self, epoch: _Optional[int] = ..., step: _Optional[int] = ..., total_steps: _Optional[int] = ..., loss: _Optional[float] = ..., accuracy: _Optional[float] = ..., learning_rate: _Optional[float] = ..., samples_per_second: _Optional[float] = ..., step_time_ms: _Optional[float] = ..., allocated_bytes: _Optional[int] = ..., batch_size: _Optional[int] = ..., loss_scale: _Optional[float] = ..., skipped: bool = ...) -> None: ...

class StreamEventsRequest(_message.Message):
    __slots__ = ["after_seq", "job_id", "latest_attempt_only", "stored_only"]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    LATEST_ATTEMPT_ONLY_FIELD_NUMBER: _ClassVar[int]
    STORED_ONLY_FIELD_NUMBER: _ClassVar[int]
    after_seq: int
    job_id: str
    latest_attempt_only: bool
    stored_only: bool
    def __init__(self, job_id: _Optional[str] = ..., after_seq: _Optional[int] = ..., stored_only: bool = ..., latest_attempt_only: bool = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ["after", "bench_job", "eval_job", "labels", "name", "predict_job", "priority", "request_id", "sweep", "train_job"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    AFTER_FIELD_NUMBER: _ClassVar[int]
    BENCH_JOB_FIELD_NUMBER: _ClassVar[int]
    EVAL_JOB_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PREDICT_JOB_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SWEEP_FIELD_NUMBER: _ClassVar[int]
    TRAIN_JOB_FIELD_NUMBER: _ClassVar[int]
    after: _containers.RepeatedScalarFieldContainer[str]
    bench_job: BenchJob
    eval_job: EvalJob
    labels: _containers.ScalarMap[str, str]
    name: str
    predict_job: PredictJob
    priority: int
    request_id: str
    sweep: SweepSpec
    train_job: TrainJob
    def __init__(self, train_job: _Optional[_Union[TrainJob, _Mapping]] = ..., bench_job: _Optional[_Union[BenchJob, _Mapping]] = ..., eval_job: _Optional[_Union[EvalJob, _Mapping]] = ..., predict_job: _Optional[_Union[PredictJob, _Mapping]] = ..., priority: _Optional[int] = ..., request_id: _Optional[str] = ..., name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., after: _Optional[_Iterable[str]] = ..., sweep: _Optional[_Union[SweepSpec, _Mapping]] = ...) -> None: ...

class SweepAssignment(_message.Message):
    __slots__ = ["path", "value"]
    PATH_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    path: str
    value: str
    def __init__(self, path: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class SweepParameter(_message.Message):
    __slots__ = ["choice", "log_uniform", "path", "uniform", "values"]
    CHOICE_FIELD_NUMBER: _ClassVar[int]
    LOG_UNIFORM_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    UNIFORM_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    choice: _containers.RepeatedScalarFieldContainer[str]
    log_uniform: _containers.RepeatedScalarFieldContainer[float]
    path: str
    uniform: _containers.RepeatedScalarFieldContainer[float]
    values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, path: _Optional[str] = ..., values: _Optional[_Iterable[str]] = ..., choice: _Optional[_Iterable[str]] = ..., uniform: _Optional[_Iterable[float]] = ..., log_uniform: _Optional[_Iterable[float]] = ...) -> None: ...

class SweepScheduler(_message.Message):
    __slots__ = ["grace_period", "metric", "min_samples_required", "mode", "reduction_factor", "type"]
    GRACE_PERIOD_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    MIN_SAMPLES_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    REDUCTION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    grace_period: int
    metric: str
    min_samples_required: int
    mode: str
    reduction_factor: int
    type: str
    def __init__(self, type: _Optional[str] = ..., metric: _Optional[str] = ..., mode: _Optional[str] = ..., grace_period: _Optional[int] = ..., reduction_factor: _Optional[int] = ..., min_samples_required: _Optional[int] = ...) -> None: ...

class SweepSpec(_message.Message):
    __slots__ = ["data_order", "fuse", "grid", "random", "scheduler"]
    DATA_ORDER_FIELD_NUMBER: _ClassVar[int]
    FUSE_FIELD_NUMBER: _ClassVar[int]
    GRID_FIELD_NUMBER: _ClassVar[int]
    RANDOM_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_FIELD_NUMBER: _ClassVar[int]
    data_order: str
    fuse: str
    grid: _containers.RepeatedCompositeFieldContainer[SweepParameter]
    random: RandomSearch
    scheduler: SweepScheduler
    def __init__(self, grid: _Optional[_Iterable[_Union[SweepParameter, _Mapping]]] = ..., random: _Optional[_Union[RandomSearch, _Mapping]] = ..., fuse: _Optional[str] = ..., data_order: _Optional[str] = ..., scheduler: _Optional[_Union[SweepScheduler, _Mapping]] = ...) -> None: ...

class SweepTrial(_message.Message):
    __slots__ = ["fused_lead", "index", "parameters", "sweep_id"]
    FUSED_LEAD_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    SWEEP_ID_FIELD_NUMBER: _ClassVar[int]
    fused_lead: str
    index: int
    parameters: _containers.RepeatedCompositeFieldContainer[SweepAssignment]
    sweep_id: str
    def __init__(self, sweep_id: _Optional[str] = ..., index: _Optional[int] = ..., parameters: _Optional[_Iterable[_Union[SweepAssignment, _Mapping]]] = ..., fused_lead: _Optional[str] = ...) -> None: ...

class SyntheticSpec(_message.Message):
    __slots__ = ["input_shape", "num_classes", "test_examples", "train_examples"]
    INPUT_SHAPE_FIELD_NUMBER: _ClassVar[int]
    NUM_CLASSES_FIELD_NUMBER: _ClassVar[int]
    TEST_EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    TRAIN_EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    input_shape: _containers.RepeatedScalarFieldContainer[int]
    num_classes: int
    test_examples: int
    train_examples: int
    def __init__(self, input_shape: _Optional[_Iterable[int]] = ..., num_classes: _Optional[int] = ..., train_examples: _Optional[int] = ..., test_examples: _Optional[int] = ...) -> None: ...

class TrainJob(_message.Message):
    __slots__ = ["batch_size", "checkpoint", "cudnn_benchmark", "dataset", "device", "distributed", "divergence_threshold", "drop_last", "early_stopping", "epochs", "eval_every_epochs", "evaluate_test", "fault_injection", "freeze", "grad_accumulation_steps", "grad_clip_norm", "label_smoothing", "loss", "max_skipped_steps", "memory_format", "metrics", "model", "nan_policy", "optimizer", "param_groups", "precision", "profile", "restart_policy", "resume_from", "schedule", "seed", "task", "tensorboard", "trainable"]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    CUDNN_BENCHMARK_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    DISTRIBUTED_FIELD_NUMBER: _ClassVar[int]
    DIVERGENCE_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    DROP_LAST_FIELD_NUMBER: _ClassVar[int]
    EARLY_STOPPING_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    EVALUATE_TEST_FIELD_NUMBER: _ClassVar[int]
    EVAL_EVERY_EPOCHS_FIELD_NUMBER: _ClassVar[int]
    FAULT_INJECTION_FIELD_NUMBER: _ClassVar[int]
    FREEZE_FIELD_NUMBER: _ClassVar[int]
    GRAD_ACCUMULATION_STEPS_FIELD_NUMBER: _ClassVar[int]
    GRAD_CLIP_NORM_FIELD_NUMBER: _ClassVar[int]
    LABEL_SMOOTHING_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    MAX_SKIPPED_STEPS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FORMAT_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    NAN_POLICY_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    PARAM_GROUPS_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    RESTART_POLICY_FIELD_NUMBER: _ClassVar[int]
    RESUME_FROM_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    TENSORBOARD_FIELD_NUMBER: _ClassVar[int]
    TRAINABLE_FIELD_NUMBER: _ClassVar[int]
    batch_size: int
    checkpoint: CheckpointSpec
    cudnn_benchmark: bool
    dataset: DatasetSpec
    device: str
    distributed: DistributedSpec
    divergence_threshold: float
    drop_last: bool
    early_stopping: EarlyStoppingSpec
    epochs: int
    eval_every_epochs: int
    evaluate_test: str
    fault_injection: FaultInjection
    freeze: _containers.RepeatedScalarFieldContainer[str]
    grad_accumulation_steps: int
    grad_clip_norm: float
    label_smoothing: float
    loss: LossSpec
    max_skipped_steps: int
    memory_format: str
    metrics: _containers.RepeatedCompositeFieldContainer[MetricSpec]
    model: ModelSpec
    nan_policy: str
    optimizer: OptimizerSpec
    param_groups: _containers.RepeatedCompositeFieldContainer[ParamGroupSpec]
    precision: str
    profile: ProfileSpec
    restart_policy: str
    resume_from: str
    schedule: ScheduleSpec
    seed: int
    task: str
    tensorboard: bool
    trainable: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, model: _Optional[_Union[ModelSpec, _Mapping]] = ..., dataset: _Optional[_Union[DatasetSpec, _Mapping]] = ..., batch_size: _Optional[int] = ..., epochs: _Optional[int] = ..., optimizer: _Optional[_Union[OptimizerSpec, _Mapping]] = ..., seed: _Optional[int] = ..., device: _Optional[str] = ..., schedule: _Optional[_Union[ScheduleSpec, _Mapping]] = ..., precision: _Optional[str] = ..., grad_accumulation_steps: _Optional[int] = ..., grad_clip_norm: _Optional[float] = ..., label_smoothing: _Optional[float] = ..., drop_last: bool = ..., eval_every_epochs: _Optional[int] = ..., checkpoint: _Optional[_Union[CheckpointSpec, _Mapping]] = ..., resume_from: _Optional[str] = ..., restart_policy: _Optional[str] = ..., memory_format: _Optional[str] = ..., distributed: _Optional[_Union[DistributedSpec, _Mapping]] = ..., profile: _Optional[_Union[ProfileSpec, _Mapping]] = ..., divergence_threshold: _Optional[float] = ..., evaluate_test: _Optional[str] = ..., early_stopping: _Optional[_Union[EarlyStoppingSpec, _Mapping]] = ..., tensorboard: bool = ..., nan_policy: _Optional[str] = ..., max_skipped_steps: _Optional[int] = ..., cudnn_benchmark: bool = ..., fault_injection: _Optional[_Union[FaultInjection, _Mapping]] = ..., freeze: _Optional[_Iterable[str]] = ..., trainable: _Optional[_Iterable[str]] = ..., param_groups: _Optional[_Iterable[_Union[ParamGroupSpec, _Mapping]]] = ..., task: _Optional[str] = ..., loss: _Optional[_Union[LossSpec, _Mapping]] = ..., metrics: _Optional[_Iterable[_Union[MetricSpec, _Mapping]]] = ...) -> None: ...

class Upload(_message.Message):
    __slots__ = ["created", "files", "kind", "name", "ref", "sha256", "size_bytes", "submitter"]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SUBMITTER_FIELD_NUMBER: _ClassVar[int]
    created: _timestamp_pb2.Timestamp
    files: int
    kind: str
    name: str
    ref: str
    sha256: str
    size_bytes: int
    submitter: str
    def __init__(self, name: _Optional[str] = ..., submitter: _Optional[str] = ..., kind: _Optional[str] = ..., size_bytes: _Optional[int] = ..., files: _Optional[int] = ..., sha256: _Optional[str] = ..., created: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., ref: _Optional[str] = ...) -> None: ...

class UploadChunk(_message.Message):
    __slots__ = ["archive", "data", "name", "offset", "replace", "sha256", "size_bytes"]
    ARCHIVE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    archive: bool
    data: bytes
    name: str
    offset: int
    replace: bool
    sha256: str
    size_bytes: int
    def __init__(self, name: _Optional[str] = ..., sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ..., archive: bool = ..., replace: bool = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class UploadStatus(_message.Message):
    __slots__ = ["complete", "offset", "quota_bytes", "used_bytes"]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    QUOTA_BYTES_FIELD_NUMBER: _ClassVar[int]
    USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    complete: bool
    offset: int
    quota_bytes: int
    used_bytes: int
    def __init__(self, offset: _Optional[int] = ..., complete: bool = ..., used_bytes: _Optional[int] = ..., quota_bytes: _Optional[int] = ...) -> None: ...

class ValidationSpec(_message.Message):
    __slots__ = ["fraction", "source"]
    FRACTION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    fraction: float
    source: str
    def __init__(self, fraction: _Optional[float] = ..., source: _Optional[str] = ...) -> None: ...
