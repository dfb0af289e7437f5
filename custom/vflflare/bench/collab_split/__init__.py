"""The collab_vs_aux suite's NVFlare job: vanilla VFL's split-NN step over NVFlare 2.9's Collab API
(split_step.py: the step in plain PyTorch; app.py: the Collab server and site; job.py: the job exported)."""
