from slurmpool.cli import main

main()
