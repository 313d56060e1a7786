"""Every Keras callback of a training run, a module each:

* `run_state.RunState`: crash-safe backups every N updates and after each epoch, and resume;
* `keep_last_checkpoints.KeepLastCheckpoints`: the epoch checkpoints, the last K kept (§6.1);
* `dev_bleu.DevBleu`: dev BLEU after each epoch;
* `early_stop.KeepBestDevBleu`: the best dev BLEU's weights, and `--patience`'s stop;
* `stops.StopAtStep`, `stops.StopAtTime`, `stops.StopOnNaN`: an exact update budget, a deadline,
  a NaN loss (none makes Keras wait for a step before it dispatches the next);
* `data_logs.LogDataCounters`, `data_logs.LogBatchShapes`, `data_logs.LogThroughput`: what the
  data did each epoch, and how fast it trained.
"""

from tfformer.train.callbacks.data_logs import LogBatchShapes, LogDataCounters, LogThroughput
from tfformer.train.callbacks.dev_bleu import DevBleu
from tfformer.train.callbacks.early_stop import KeepBestDevBleu
from tfformer.train.callbacks.keep_last_checkpoints import KeepLastCheckpoints
from tfformer.train.callbacks.run_state import RunState
from tfformer.train.callbacks.stops import StopAtStep, StopAtTime, StopOnNaN

__all__ = ["DevBleu", "KeepBestDevBleu", "KeepLastCheckpoints", "LogBatchShapes",
           "LogDataCounters", "LogThroughput", "RunState", "StopAtStep", "StopAtTime", "StopOnNaN"]
