"""The backup store: a backup's files and their layout (backups.py), the writer's lease, a backup's archive opened
for reading (opening.py), the commands on a store's backups (catalog.py), retention."""
