"""``python -m dynocell`` is the ``dynocell`` command."""

from dynocell.cli.app import main

if __name__ == "__main__":
    main()
