"""A working folder per replica process, as each worker of a real cluster has a disk of its own.

On a cluster every worker runs in its own container: the files a script
writes in its working folder (a checkpoint, a saved model, a folder made
with ``os.mkdir``) never meet another worker's.  The local launcher starts
every replica on this machine; started in one folder, two replicas write the
same files at once: an HDF5 checkpoint one holds locked while the other
opens it, a ``.keras`` archive one rewrites while the other reads it back,
an ``os.mkdir`` that fails in the second.  TensorFlow's multi-worker
tutorial gives each worker the same rule for the same reason: the chief
saves to the path the user gave, every other worker to a temporary folder
of its own, removed after, so that the workers never write one file.

So the first replica (the chief, whose files the user expects) runs in the
user's folder, and every other replica in a fresh folder of its own
(:func:`own_folder`) holding a symbolic link to each entry of the user's
folder: what the script reads by a relative path (a data file, a folder of
images, a module beside it) is there, and what it creates is its own and is
removed with the run.  ``autodist bench`` runs even the chief in a folder of
its own, so every strategy's run starts from the same files and none is
left in the user's folder.

Capture runs the script in such a folder too (:func:`scratch_folder`), until its first training step: what
the script writes before it (initial weights saved to reload, a generated data file) is removed with the folder,
so ``autodist run`` and ``autodist bench``, which capture before they train, do not leave it in the user's folder
as an entry every replica's folder would link and write through.

What stays shared, as on workers that mount one network file system:

- an entry that existed before the run: a replica that overwrites such a
  file in place, or writes into such a folder, writes the user's copy
  through the link (remove it before the run, or write to a new name);
- absolute paths outside the working folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile


def own_folder(parent, name, source=None):
    """A new folder ``parent/name`` that links each entry of ``source`` (default: the current folder); its path.

    The entries are linked, not copied (a dataset folder costs one link); an
    entry that holds ``parent`` itself is left out, so the folder never
    contains itself.
    """
    source = os.path.abspath(source or os.getcwd())
    folder = os.path.join(parent, name)
    os.mkdir(folder)
    inside = os.path.realpath(parent)
    for entry in os.scandir(source):
        target = os.path.realpath(entry.path)
        if inside == target or inside.startswith(target + os.sep):
            continue
        os.symlink(entry.path, os.path.join(folder, entry.name))
    return folder


@contextlib.contextmanager
def scratch_folder(prefix):
    """Inside: the process works in a new temporary folder (named from ``prefix``) that links each entry of the
    current folder (:func:`own_folder`); after, the current folder is back and the temporary one removed."""
    here = os.getcwd()
    parent = tempfile.mkdtemp(prefix=prefix)
    try:
        os.chdir(own_folder(parent, "work", here))
        yield
    finally:
        os.chdir(here)
        shutil.rmtree(parent, ignore_errors=True)
