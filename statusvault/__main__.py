from statusvault.cli.main import entry

if __name__ == "__main__":  # restore worker processes (spawned) import this module again: do not run twice
    entry()
