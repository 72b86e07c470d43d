"""Elastic training with accord.torch, written as a Horovod elastic script is.

  accordrun -np 4 --min-np 2 --max-np 8 --host-discovery-script ./hosts.sh \
      python3 examples/python/elastic_train.py --epochs 5

hosts.sh prints one 'host:slots' line per usable host. When a host fails, the job starts
again on the others from the last commit; when hosts.sh offers or withdraws a host, the
job moves to the new set at its next commit. See docs/elastic.md.
"""
import argparse

import torch

import accord.torch as hvd

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=5)
p.add_argument("--samples", type=int, default=4096)
p.add_argument("--batch-size", type=int, default=32)
p.add_argument("--base-lr", type=float, default=0.01)
p.add_argument("--commit-every", type=int, default=10, help="steps between commits")
args = p.parse_args()

hvd.init()
torch.manual_seed(0)
# A synthetic classification task; a real script builds its Dataset here.
g = torch.Generator().manual_seed(1)
features = torch.randn(args.samples, 32, generator=g)
labels = (features[:, :4].sum(dim=1) > 0).long()
dataset = torch.utils.data.TensorDataset(features, labels)

model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=args.base_lr * hvd.size(), momentum=0.9),
    named_parameters=model.named_parameters())
# batch_size lets the sampler give every rank the same number of batches in a resumed
# epoch while still taking each remaining sample once.
sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, batch_size=args.batch_size)
loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)


def rescale_lr():
    """After a reset the number of ranks, and so the global batch, may have changed."""
    for group in optimizer.param_groups:
        group["lr"] = args.base_lr * hvd.size()


state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, step=0)
state.register_reset_callbacks([rescale_lr])


@hvd.elastic.run
def train(state):
    while state.epoch < args.epochs:
        for batch_idx, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            sampler.record_batch(batch_idx, args.batch_size)
            state.step += 1
            if state.step % args.commit_every == 0:
                state.commit()  # after a failure, training resumes from here
        if hvd.rank() == 0:
            print(f"epoch {state.epoch}: loss {loss.item():.4f} on {hvd.size()} ranks", flush=True)
        state.epoch += 1
        sampler.set_epoch(state.epoch)
        state.commit()


train(state)
