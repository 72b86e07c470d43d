"""ElasticSampler: an epoch that resumes after a reset takes every sample not yet
processed in it exactly once, over the new set of ranks.

The remaining indices (the epoch's shuffled order less the processed ones) are dealt in
rounds of size() * batch_size: each full round gives every rank one batch, and the last,
shorter round is split evenly, so every rank takes the same number of batches and the
collectives stay in step. Only when that last round has fewer samples than there are
ranks do some ranks get a sample again (as Horovod pads): pass the DataLoader's
batch_size for this guarantee; without it the sampler deals one sample at a time, as
Horovod's does.
"""

import operator

import torch
import torch.utils.data


def deal(remaining, replicas, batch_size):
    """Every rank's indices: rounds of replicas * batch_size, the last split evenly; a
    last round shorter than replicas is padded from the start of ``remaining``."""
    shards = [[] for _ in range(replicas)]
    per_round = replicas * batch_size
    for start in range(0, len(remaining), per_round):
        chunk = remaining[start:start + per_round]
        if len(chunk) < replicas:
            chunk = chunk + (remaining * replicas)[:replicas - len(chunk)]
        base, extra = divmod(len(chunk), replicas)
        offset = 0
        for r in range(replicas):
            take = base + (1 if r < extra else 0)
            shards[r].extend(chunk[offset:offset + take])
            offset += take
    return shards


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's ElasticSampler(dataset, shuffle=True, seed=0), plus ``batch_size``.
    Call record_batch(batch_idx, batch_size) (or record_indices) after each batch and
    set_epoch(epoch) at the start of each epoch; keep it in the TorchState.

    Where Horovod counts processed samples, Accord records which ones: record_batch
    records the next ``batch_size`` of this rank's samples that this pass over the
    sampler has not recorded yet (``batch_idx`` is taken for Horovod's signature; a
    loop over the DataLoader records the batch it has just taken, also when it numbers
    its batches from where an interrupted epoch left off). A pass starts at iter() and
    after every reset (set_epoch, a restore or sync of the TorchState)."""

    def __init__(self, dataset, shuffle=True, seed=0, batch_size=None):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.batch_size = batch_size
        self.epoch = 0
        self.processed_indices = set()
        self._new = set()
        self._recorded = 0  # this pass's samples recorded so far: the next start
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_indices = set()
        self._new = set()
        self.reset()

    @property
    def processed_num(self):
        """Horovod's count: the samples of this epoch processed by every rank together,
        as far as this rank knows: every rank's up to the last commit (which gathers
        them), and this rank's own since then once for each rank (ranks take the same
        number of batches)."""
        return len(self.processed_indices) + len(self._new) * (self.num_replicas - 1)

    def record_batch(self, batch_idx, batch_size):
        """Records this rank's next ``batch_size`` samples of the pass as processed."""
        try:
            count = operator.index(batch_size)
        except TypeError:
            count = 0
        if count < 1:
            raise ValueError(f"ElasticSampler.record_batch: batch_size {batch_size!r}: "
                             "expected a positive integer")
        start = self._recorded
        self._recorded = min(start + count, len(self.indices))
        self.record_indices(self.indices[start:self._recorded])

    def record_indices(self, indices):
        indices = [int(i) for i in indices]
        self.processed_indices.update(indices)
        self._new.update(indices)

    def get_indices(self, batch_idx, batch_size):
        """This rank's batch ``batch_idx`` of the current deal."""
        return self.indices[batch_idx * batch_size:(batch_idx + 1) * batch_size]

    def _take_new_indices(self):
        new, self._new = self._new, set()
        return new

    def state_dict(self):
        # processed_num is Horovod's key (its whole state with the epoch), for scripts
        # that read it; the indices say which samples, so that any rank count resumes.
        return {"epoch": self.epoch, "processed_indices": sorted(self.processed_indices),
                "processed_num": self.processed_num}

    def load_state_dict(self, state_dict):
        """Loads Accord's state, or Horovod's ({epoch, processed_num}), which does not
        say which samples were processed: the epoch's first processed_num in this
        sampler's order stand for them, so the epoch's count of samples holds."""
        if "processed_indices" not in state_dict and "processed_num" not in state_dict:
            raise ValueError(f"ElasticSampler.load_state_dict: expected 'epoch' with "
                             f"'processed_indices' (or Horovod's 'processed_num'), got keys "
                             f"{sorted(state_dict)}")
        self.epoch = state_dict["epoch"]
        if "processed_indices" in state_dict:
            self.processed_indices = set(state_dict["processed_indices"])
        else:
            self.processed_indices = set(self._order()[:int(state_dict["processed_num"])])
        self._new = set()
        self.reset()

    def reset(self):
        """Deals the epoch's remaining indices over the current ranks."""
        from accord.basics import rank, size
        self.num_replicas, self.rank = size(), rank()
        self.remaining_indices = [i for i in self._order() if i not in self.processed_indices]
        self.indices = deal(self.remaining_indices, self.num_replicas,
                            self.batch_size or 1)[self.rank]
        self.num_samples = len(self.indices)
        self._recorded = 0

    def _order(self):
        """The epoch's order of the dataset's indices, the same on every rank."""
        if not self.shuffle:
            return list(range(len(self.dataset)))
        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)
        return torch.randperm(len(self.dataset), generator=g).tolist()

    def __iter__(self):
        self._recorded = 0
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
