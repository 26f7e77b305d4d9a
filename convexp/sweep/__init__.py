"""Named sweeps: ``conf/sweep/NAME.yaml`` → a graph of stage runs → a launcher → the run store.

A sweep (format: ``docs/guides/own-sweep.md``) names its variants as sets of Hydra overrides. The plan
expands it into nodes, each one ordinary stage command (``convexp pretrain ...`` or ``convexp
finetune glue task=T seeds=[S] init=<that variant's pre-training run>``), and knows every node's
run directory before anything runs, because run ids are hashes of the composed configs. So:

- a node whose runs have finished is *cached*: re-running a sweep trains nothing twice;
- an unfinished node resumes from its last checkpoint (the stage commands do that);
- a node fails alone: its dependents are *blocked*, everything else still runs, and the failures
  are listed at the end (exit code 1);
- ``convexp report`` rebuilds the same plan and reads the same directories.

Data flows one way through the modules:

    spec.py         the sweep file: dataclasses, loading, checks
    args.py         the command line: the sweep's own settings vs each stage's overrides
    start.py        where a variant's fine-tuning starts (its pre-training run or a checkpoint)
    nodes.py        one variant's stage commands (nodes) and their run directories
    plan.py         the whole graph: every selected variant's nodes in dependency order
    compute.py      training FLOPs and parameter counts (the --dry-run estimate, the report)
    memory.py       a job's estimated peak GPU memory (what launcher.per_gpu=auto packs cards by)
                    and host memory (what a SLURM job asks for)
    gpus.py         launcher=local on a GPU machine: which card(s) each worker's job runs on
    rates.py        the training rates measured on cards (card, mode, date): every GPU-hour's basis
    cards.py        recipe cards: the settings of each distinct pre-training / fine-tuning recipe
    schedule.py     time on a cluster: each job's hours, wall-clock on N GPUs with dependencies vs waves
    launchers.py    walk the graph here or in N worker processes; on SLURM submit it all at once
                    (afterok dependencies); or run one node
    execute.py      run one node; the outcomes and the ledger (outputs/sweeps/NAME/last.json)
    node_job.py     one node (or a pack of fine-tunes) as a submitit job: requeued at its time limit, it resumes
    slurm.py        SLURM's view of the jobs (squeue, sacct), of its partitions (sinfo), and scancel
    requests.py     what each SLURM job asks for (GPUs, tasks, CPUs, memory, time) from its own node;
                    fine-tunes packed on one GPU; the partition's check
    status.py       --status and --follow: each node's state, GPU-hours, the estimated finish
    wandb_sweep.py  the same sweep as a W&B sweep file (a grid over the nodes: one node per agent job)
    show.py         the tables: --list, --dry-run and the end-of-sweep summary
"""
