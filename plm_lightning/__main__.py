import sys

from plm_lightning.command_index import answer_without_lightning

if __name__ == "__main__":
    answered = answer_without_lightning(sys.argv[1:])  # --help and typos, answered without loading Lightning
    if answered is not None:
        sys.exit(answered)
    from plm_lightning.cli import main

    main()
