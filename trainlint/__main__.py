from trainlint.cli import main

main()
